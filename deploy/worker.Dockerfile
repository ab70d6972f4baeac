# The streamremat worker (and load generator) image, used by docker-compose.yml.
# Build context is the repository root:
#   docker build -f deploy/worker.Dockerfile -t streamremat:dev .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src

# Dependencies first, from the pinned constraints: this layer survives source edits.
COPY pyproject.toml constraints.txt ./
RUN mkdir -p streamremat operators \
    && touch streamremat/__init__.py operators/__init__.py \
    && pip install -c constraints.txt . \
    && pip uninstall -y streamremat

COPY streamremat ./streamremat
COPY operators ./operators
RUN pip install --no-deps -c constraints.txt .

# Local checkpoints (RocksDB) go under the working directory. It is the
# container's own filesystem on purpose: replicas must not share a RocksDB, and a
# fresh container restores from the compacted checkpoint topic.
RUN useradd --system --create-home --uid 10001 streamremat \
    && mkdir -p /var/lib/streamremat \
    && chown streamremat /var/lib/streamremat
USER streamremat
WORKDIR /var/lib/streamremat

# Prometheus metrics (PrometheusSensor.serve).
EXPOSE 9100
ENTRYPOINT ["streamremat"]
CMD ["worker", "operators.clicks:app"]
