# One image for every service of docker-compose.yml: migrate, worker, beat, flower and api.
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md beat_schedule.py ./
COPY repository ./repository
COPY tasks ./tasks
COPY media_usage_worker ./media_usage_worker
RUN pip install '.[flower,api]' \
    && useradd --system --home-dir /app --shell /usr/sbin/nologin media-usage
# Celery refuses to be comfortable as root; nothing here needs it.
USER media-usage
CMD ["media-usage", "--help"]
