"""cron package."""
