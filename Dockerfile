# The Publishing Gateway: granian serving the Flask app (WSGI). The ledger lives on a volume at /data
# (SQLite by default; set GATEWAY_DATABASE_URL=postgresql://... for several instances).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GATEWAY_DATABASE_URL=sqlite:////data/gateway.ledger.db

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin gateway \
    && mkdir -p /data && chown gateway:gateway /data

USER gateway
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --retries=6 \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"
CMD ["gateway", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "4"]
