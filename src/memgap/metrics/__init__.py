"""Metrics: ``memgap serve-metrics``.

``export`` renders snapshots as Prometheus' text format (pure), ``scrape`` finds and reads the
processes asked for, ``server`` answers HTTP, bounded whoever connects. (``memgap.prometheus`` is
the other side: metrics a process registers on itself with prometheus_client.)
"""
