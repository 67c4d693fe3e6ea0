# MLflow tracking server for infra/docker-compose.yaml: the version the flows use, plus the
# Postgres driver (backend store) and boto3 (artifacts proxied to MinIO), which mlflow alone lacks.
FROM python:3.11-slim
RUN pip install --no-cache-dir mlflow==3.17.2 psycopg2-binary boto3
