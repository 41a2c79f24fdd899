"""What operators watch: the figures collected from the database (`metrics`), their Prometheus
text (`prometheus`), and OpenTelemetry spans (`tracing`)."""
