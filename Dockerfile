# gpeserve image. It is built by the same scripts/setup that CI runs, so what CI proves is what
# the image does. (A slimmer multi-stage runtime, non-root user and the CUDA variant arrive
# with the deployment work.)
#
#   docker build -t gpeserve .
#   docker run -p 50051:50051 -p 9090:9090 gpeserve [--model /models/DIR ...]
ARG BASE=debian:12
FROM ${BASE} AS build
WORKDIR /src
COPY scripts/setup scripts/setup
RUN scripts/setup --deps-only && rm -rf /var/lib/apt/lists/*
COPY . .
RUN CMAKE_ARGS="-DGPESERVE_BUILD_TESTS=OFF" scripts/setup \
 && install -m 0755 build/engine/cli/gpe build/server/gpeserve build/client/gpe-client \
      /usr/local/bin/

FROM build AS runtime
WORKDIR /work
EXPOSE 50051 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s \
  CMD ["gpe-client", "health", "--server", "127.0.0.1:50051"]
ENTRYPOINT ["gpeserve", "--listen", "0.0.0.0:50051", "--metrics_listen", "0.0.0.0:9090"]
