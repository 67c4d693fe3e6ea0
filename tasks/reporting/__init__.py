"""What a run reports: MLflow tracking, runs read back and the model registry; Prefect run logs and progress; figures."""
