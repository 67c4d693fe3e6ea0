"""The artifact store (local folder or S3) and what lives in it: manifests, provenance, Parquet datasets, checkpoints, models."""
