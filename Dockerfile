# syntax=docker/dockerfile:1
# gpeserve image. The build stage compiles with the same scripts/setup that CI runs, so what CI
# proves is what the image contains; the runtime stage holds the three binaries and only the
# shared libraries they load (scripts/setup --runtime-deps), and runs as an unprivileged user.
# The default model is compiled into the binaries: there is nothing to copy or mount.
#
#   docker build -t gpeserve .                                  CPU: Debian's libtorch 1.13
#   docker run --rm -p 50051:50051 -p 9090:9090 gpeserve [gpeserve flags...]
#
#   docker build --build-arg TORCH=cuda -t gpeserve:cuda .      CUDA: PyPI torch 2.7.1+cu126
#   docker run --rm --gpus all -p 50051:50051 -p 9090:9090 gpeserve:cuda --device cuda --dtype bf16
#
# A model folder of your own: -v /path/to/model:/models/m:ro and the flag --model /models/m.
# docs/deploy.md has the details (versions, compose, Kubernetes).

# cpu or cuda: which libtorch the engine is built against (selects the stages below).
ARG TORCH=cpu

# ---- Build dependencies: every Debian package of scripts/setup (a layer that code edits keep) ---
FROM debian:bookworm AS deps
WORKDIR /src
COPY scripts/setup scripts/setup
RUN scripts/setup --deps-only && rm -rf /var/lib/apt/lists/*

# ---- CPU build: Debian's libtorch 1.13 (libtorch-dev), exactly what CI builds and tests -------
FROM deps AS build-cpu
COPY . .
RUN CMAKE_ARGS="-DGPESERVE_BUILD_TESTS=OFF" scripts/setup

# ---- CUDA build: the libtorch inside PyPI's CUDA torch wheel, found through CMAKE_PREFIX_PATH ---
# Versions, which must move together: torch 2.7.1 from PyPI, whose Linux x86_64 wheel is built
# for CUDA 12.6 and brings cuBLAS, cuDNN and NCCL as nvidia-* wheels (2.7 is the first PyPI
# release built with the C++11 string ABI, which linking against Debian's gRPC and abseil
# needs), and NVIDIA's CUDA 12.6 toolkit for Debian 12 (nvcc, for -DGPESERVE_ENABLE_CUDA=ON,
# and the headers and libraries that Torch's CMake package looks for). The host needs an
# NVIDIA driver for CUDA 12.6 and the NVIDIA Container Toolkit (docker run --gpus all).
FROM deps AS build-cuda
ARG TORCH_VERSION=2.7.1
ARG CUDA_PACKAGE_VERSION=12-6
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates wget \
 && wget -q -O /tmp/cuda-keyring.deb \
      https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb \
 && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
 && apt-get update \
 && apt-get install -y --no-install-recommends cuda-toolkit-${CUDA_PACKAGE_VERSION} \
 && rm -rf /var/lib/apt/lists/*
# The venv lives where the runtime stage puts the same libraries: the binaries' RPATH points here.
RUN python3 -m venv /opt/torch \
 && /opt/torch/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}"
COPY . .
RUN CMAKE_ARGS="-DGPESERVE_BUILD_TESTS=OFF -DGPESERVE_ENABLE_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      -DCMAKE_PREFIX_PATH=$(/opt/torch/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
    scripts/setup

FROM build-${TORCH} AS build

# ---- Runtime bases: only what the binaries load ------------------------------------------------
FROM debian:bookworm-slim AS runtime-cpu
COPY scripts/setup /tmp/setup
RUN /tmp/setup --runtime-deps && rm -rf /var/lib/apt/lists/* /tmp/setup

FROM debian:bookworm-slim AS runtime-cuda
COPY scripts/setup /tmp/setup
RUN RUNTIME_TORCH=none /tmp/setup --runtime-deps && rm -rf /var/lib/apt/lists/* /tmp/setup
# libtorch and the CUDA libraries the wheel depends on (cuBLAS, cuDNN, NCCL...: nvidia/*), at the
# build stage's paths so that the binaries' RPATH and libtorch's own $ORIGIN/../../nvidia RPATHs
# resolve unchanged (python3.11: Debian 12's Python). The driver (libcuda) comes from the host.
ARG TORCH_SITE=/opt/torch/lib/python3.11/site-packages
COPY --from=build ${TORCH_SITE}/torch/lib ${TORCH_SITE}/torch/lib
COPY --from=build ${TORCH_SITE}/nvidia ${TORCH_SITE}/nvidia
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility

# ---- Runtime ---------------------------------------------------------------------------------
FROM runtime-${TORCH} AS runtime
COPY --from=build /src/build/server/gpeserve /src/build/client/gpe-client /src/build/engine/cli/gpe \
     /src/build/engine/cli/gpe-engine /usr/local/bin/
# Every library the binaries load must resolve here (the host's libcuda aside): a missing one
# fails the build, not the first start.
RUN if ldd /usr/local/bin/gpeserve /usr/local/bin/gpe-client /usr/local/bin/gpe \
          /usr/local/bin/gpe-engine \
       | grep -v 'libcuda\.so' | grep 'not found'; then exit 1; fi
# A fixed numeric uid, so that Kubernetes' runAsNonRoot can verify it without a runAsUser.
RUN groupadd --system --gid 10001 gpeserve \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/gpeserve gpeserve
USER 10001:10001
WORKDIR /home/gpeserve
# gRPC and Prometheus /metrics. Both listen on every interface inside the container; publish
# them only where they should be reachable (no TLS or token unless given: docs/deploy.md).
EXPOSE 50051 9090
# SERVING once the model is loaded and warmed up; NOT_SERVING while draining after SIGTERM.
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
  CMD ["gpe-client", "health", "--server", "127.0.0.1:50051", "--timeout", "4"]
# Extra arguments (docker run IMAGE --flag ...) are gpeserve flags. On SIGTERM it drains for up to
# --drain_seconds (30): give `docker stop` a longer timeout (-t 40; compose: stop_grace_period).
ENTRYPOINT ["gpeserve", "--listen", "0.0.0.0:50051", "--metrics_listen", "0.0.0.0:9090"]
