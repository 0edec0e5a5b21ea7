# syntax=docker/dockerfile:1
# gpeserve image, CPU (Debian's libtorch 1.13). The build stage compiles with the same
# scripts/setup that CI runs, so what CI proves is what the image contains; the runtime stage
# holds the binaries and only the shared libraries they load (scripts/setup --runtime-deps), and
# runs as an unprivileged user. The default model is compiled into the binaries: there is
# nothing to copy or mount.
#
#   docker build -t gpeserve .
#   docker run --rm -p 50051:50051 -p 9090:9090 gpeserve [gpeserve flags...]
#
# Every stage here is part of the CPU image, so any builder builds the same thing: BuildKit, and
# the classic builder of Debian 12's docker.io (which builds every stage of a file). The CUDA
# image has its own file, Dockerfile.cuda (docker build -f Dockerfile.cuda -t gpeserve:cuda .).
# A model folder of your own: -v /path/to/model:/models/m:ro and the flag --model /models/m.
# docs/deploy.md has the details (versions, compose, Kubernetes, image size).

# ---- Build dependencies: every Debian package of scripts/setup (a layer that code edits keep) ---
FROM debian:bookworm AS deps
WORKDIR /src
COPY scripts/setup scripts/setup
RUN scripts/setup --deps-only && rm -rf /var/lib/apt/lists/*

# ---- Build: Debian's libtorch 1.13 (libtorch-dev), exactly what CI builds and tests ----------
FROM deps AS build
COPY . .
RUN CMAKE_ARGS="-DGPESERVE_BUILD_TESTS=OFF" scripts/setup

# ---- Runtime: only what the binaries load -----------------------------------------------------
FROM debian:bookworm-slim AS runtime
COPY scripts/setup /tmp/setup
RUN /tmp/setup --runtime-deps && rm -rf /var/lib/apt/lists/* /tmp/setup
COPY --from=build /src/build/server/gpeserve /src/build/client/gpe-client /src/build/cli/gpe \
     /src/build/cli/gpe-engine /usr/local/bin/
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
