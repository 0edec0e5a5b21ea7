# gpeserve image. It is built by the same scripts/setup that CI runs, so what CI proves is what
# the image does.
#
#   docker build -t gpeserve .
#   docker build --build-arg BASE=<a CUDA-enabled Debian 12 image> -t gpeserve:cuda .
ARG BASE=debian:12
FROM ${BASE} AS build
WORKDIR /src
COPY scripts/setup scripts/setup
RUN scripts/setup --deps-only && rm -rf /var/lib/apt/lists/*
COPY . .
RUN CMAKE_ARGS="-DGPESERVE_BUILD_TESTS=OFF" scripts/setup \
 && install -m 0755 build/engine/cli/gpe /usr/local/bin/gpe

FROM build AS runtime
WORKDIR /work
ENTRYPOINT ["gpe"]
CMD ["--help"]
