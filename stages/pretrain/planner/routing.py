"""Where a token's expert copies travel in one expert-parallel all-to-all: over InfiniBand, over NVLink.

Expert parallelism puts experts on consecutive EP ranks (torchtitan shards the expert dimension with Shard(0)
over the EP mesh, the innermost mesh axis, so an EP group is consecutive global ranks): EP rank r holds experts
[r E/EP, (r+1) E/EP), and an EP group spans N = EP / GPUs-per-node nodes. Routing is assumed balanced (the
aux-loss-free bias keeps it near): each of a token's k copies lands on a uniformly random expert.

Two dispatchers (torchtitan's `moe_comm_backend`):
- standard (NCCL all_to_all_single): one row per (token, expert) copy, whatever rank or node it goes to, so a
  token sends k (N-1)/N copies across nodes. Node-limited routing does NOT change that: by symmetry each copy's
  node is still uniform over the N nodes; it only bounds how many peers a token talks to.
- deepep (DeepEP's kernels): one copy per destination node over InfiniBand (RDMA to the GPU of the same index
  there), then NVLink inside the node; inside a node one copy per destination GPU. Here node-limited routing
  pays: a token reaches at most M nodes, so at most M - 1 copies cross the network instead of up to k.

Node-limited routing (torchtitan's router: `num_expert_groups` G equal groups of experts, a token picks
`num_limited_groups` M of them, then its top-k experts inside them). The groups bound the nodes only when they
line up with them: G a multiple of N (each node holds whole groups) or N a multiple of G (each group spans whole
nodes). Otherwise a group straddles nodes and no node bound follows.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb


@dataclass(frozen=True)
class TokenTraffic:
    """Expected dim-vectors one token sends per all-to-all, by link, and the nodes its experts live on."""

    ib_copies: float
    nvlink_copies: float
    nodes_per_token: float        # expected distinct nodes holding its experts (its own node included)
    max_nodes: int                # the bound routing guarantees
    nodes_spanned: int            # nodes one EP group spans
    aligned: bool                 # the groups line up with nodes (or routing is not limited)


def _p_node_hit(k: int, nodes: int, groups: int | None, limited: int | None) -> tuple[float, int, bool]:
    """Probability that a given node receives at least one of a token's k copies; the node bound; aligned?"""
    if groups is None or limited is None or nodes <= 1:
        return 1 - (1 - 1 / nodes) ** k, min(nodes, k), True
    if groups % nodes == 0:  # c whole groups per node: node j holds i of the M chosen groups (hypergeometric)
        c = groups // nodes
        total = comb(groups, limited)
        p = sum(comb(c, i) * comb(groups - c, limited - i) / total * (1 - (1 - i / limited) ** k)
                for i in range(1, min(c, limited) + 1))
        return p, min(nodes, limited, k), True
    if nodes % groups == 0:  # each group spans s whole nodes
        s = nodes // groups
        return limited / groups * (1 - (1 - 1 / (limited * s)) ** k), min(nodes, limited * s, k), True
    return 1 - (1 - 1 / nodes) ** k, min(nodes, k), False


def token_traffic(*, top_k: int, expert_parallel: int, gpus_per_node: int, dispatcher: str,
                  num_expert_groups: int | None = None, num_limited_groups: int | None = None) -> TokenTraffic:
    ep, k = expert_parallel, top_k
    local = min(ep, gpus_per_node)               # EP ranks on a token's own node (itself included)
    nodes = max(1, -(-ep // gpus_per_node))
    p_hit, bound, aligned = _p_node_hit(k, nodes, num_expert_groups, num_limited_groups)
    if not aligned:
        num_expert_groups = num_limited_groups = None
    if dispatcher == "standard":
        # each copy: uniform over the ep ranks; (ep - local) of them on other nodes, (local - 1) on own node
        return TokenTraffic(k * (ep - local) / ep, k * (local - 1) / ep, nodes * p_hit, bound, nodes, aligned)
    if dispatcher != "deepep":
        raise ValueError(f"unknown dispatcher {dispatcher!r}: standard or deepep")
    ib = (nodes - 1) * p_hit
    # distinct ranks a token reaches: copies uniform over the ranks of the chosen groups
    if num_expert_groups is None:
        ranks_pool = ep
    else:
        ranks_pool = max(1.0, num_limited_groups * ep / num_expert_groups)
    ranks_hit = ranks_pool * (1 - (1 - 1 / ranks_pool) ** k)
    # NVLink: own node's other ranks, plus forwarding inside each remote node beyond the rank that received it
    own_others = (local - 1) * (ranks_hit / ep)
    forwarded = max(0.0, ranks_hit * (nodes - 1) / nodes - ib) if nodes > 1 else 0.0
    return TokenTraffic(ib, own_others + forwarded, nodes * p_hit, bound, nodes, aligned)
