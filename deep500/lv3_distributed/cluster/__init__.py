"""An emulated cluster on one host: one Linux network namespace per node, links of a
set rate between them (tc's token bucket), and MPICH over TCP across them, so that
Level 3 is measured where communication is a network's, not the memory system's
(docs/cluster_emulation.md)."""
from deep500.lv3_distributed.cluster.spec import (ClusterSpec, cluster_from_mapping,
                                                  parse_cluster)
from deep500.lv3_distributed.cluster.session import (EmulatedCluster, active_cluster,
                                                     cluster_description,
                                                     current_description,
                                                     emulated_cluster)
from deep500.lv3_distributed.cluster.leftovers import live_clusters, remove_leftovers
from deep500.lv3_distributed.cluster.commands import require_privileges

__all__ = ["ClusterSpec", "EmulatedCluster", "active_cluster", "cluster_description",
           "cluster_from_mapping", "current_description", "emulated_cluster",
           "live_clusters", "parse_cluster", "remove_leftovers", "require_privileges"]
