-- First start of the stack's Postgres: a second database for MLflow beside Prefect's (POSTGRES_DB).
CREATE DATABASE mlflow;
