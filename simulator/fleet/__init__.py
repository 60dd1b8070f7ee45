"""Fleets of replicas: the cluster, its router and its autoscaler."""
