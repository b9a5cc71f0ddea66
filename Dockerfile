# The chat gateway in a container (see docs/operators.md, "In a container").
#
#   docker build -t chat-gateway .
#   docker run -d --name gateway -v gateway-data:/srv/gateway/data \
#       -e OPENAI_API_KEY -e TELEGRAM_BOT_TOKEN \
#       -v "$PWD/gateway.toml:/srv/gateway/gateway.toml:ro" chat-gateway
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/chat-gateway
COPY pyproject.toml README.md ./
COPY config ./config
COPY threads ./threads
COPY channels ./channels
COPY cron ./cron
COPY gateway ./gateway
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /srv/gateway --create-home gateway \
    && install -d -m 0700 -o gateway -g gateway /srv/gateway/data

USER gateway
WORKDIR /srv/gateway
# data_dir is /srv/gateway/data: mount a volume there to keep sessions, cron jobs and pairings.
VOLUME ["/srv/gateway/data"]
# The web chat listens on 127.0.0.1 inside the container unless [http] host says
# otherwise; off loopback it needs a token (GATEWAY_CHANNELS__WEB__TOKEN).
EXPOSE 8765
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s CMD ["gateway", "health"]
CMD ["gateway", "run", "--log-level", "info"]
