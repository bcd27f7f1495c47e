"""Shared infrastructure: descriptors, the metric protocol, statistics, timers."""
