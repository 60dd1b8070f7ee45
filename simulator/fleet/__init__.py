"""Fleets of replicas: the cluster, its router and its autoscaler."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.scenario.config import Scenario


def engine_groups(sc: Scenario) -> list[tuple[Scenario, int, str]]:
    """(scenario, count, where it is defined) of each group of engines ``sc`` runs: itself once for
    one engine, or its fleet's replica groups (``cluster.replica_groups_of``, imported only for a
    fleet: a single engine's run does not load the fleet's modules)."""
    if sc.cluster is None and sc.disaggregation is None:
        return [(sc, 1, "")]
    from simulator.fleet.cluster import replica_groups_of

    return replica_groups_of(sc)
