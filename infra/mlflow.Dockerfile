# MLflow tracking server for infra/docker-compose.yaml: the version the flows use, plus the
# Postgres driver (backend store) and boto3 (artifacts proxied to MinIO), which mlflow alone lacks.
# psycopg 3, named in the backend store URI (postgresql+psycopg://): SQLAlchemy 2.1 maps a bare
# postgresql:// to it, so psycopg2 alone failed at start ("No module named 'psycopg'", found by
# tests/test_stack_postgres.py); the same versions as constraints.txt.
FROM python:3.11-slim
RUN pip install --no-cache-dir mlflow==3.17.2 "psycopg[binary]==3.3.9" boto3==1.44.8
