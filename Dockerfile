# syntax=docker/dockerfile:1
#
# tollgate: one static binary, one image, two roles (`tollgate controller`,
# `tollgate gateway`); the Deployment's args pick the role.
#
#   docker build -t tollgate:dev \
#     --build-arg COMMIT=$(git rev-parse HEAD) --build-arg BUILD_DATE=$(git log -1 --format=%cI) .
#   docker buildx build --platform linux/amd64,linux/arm64 -t tollgate:dev .
#
# The build stage runs on the builder's own platform and cross-compiles (Go
# needs no emulation for that); TARGETOS/TARGETARCH are set by BuildKit.
# The `go build` line must stay in step with GO_BUILD_FLAGS in the Makefile:
# hack/packaging's TestDockerfileBuild runs that very line and checks the
# result is a static binary. The version comes from the VERSION file (embedded);
# COMMIT and BUILD_DATE are stamped when given. `make image` builds the same
# image without a Docker daemon (hack/image).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG COMMIT=""
ARG BUILD_DATE=""
WORKDIR /src

# Dependencies first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN go mod download

COPY . .
# The cache mount keeps compiled packages between builds (BuildKit).
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X github.com/tollgate-dev/tollgate/internal/version.commit=${COMMIT} -X github.com/tollgate-dev/tollgate/internal/version.buildDate=${BUILD_DATE}" -o /tollgate .

# distroless/static: CA certificates, /etc/passwd with the nonroot user
# (65532), tzdata; no shell, no package manager.
FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="Distributed rate limiter for API gateways: Kubernetes controller and gateway data plane" \
      org.opencontainers.image.source="https://github.com/tollgate-dev/tollgate"
COPY --from=build /tollgate /tollgate
USER 65532:65532
# 8080: gateway proxy or controller metrics; 9090: gateway admin
# (metrics, probes); 8081: controller probes.
EXPOSE 8080 8081 9090
ENTRYPOINT ["/tollgate"]
