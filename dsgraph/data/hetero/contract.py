"""Heterogeneous graphs: the contract their loaders return, reverse relations, detection of
heterogeneous OGB / DGL CSV folders, and a synthetic generator.

The contract (the trainer and the partitioner rely on it): a ``dgl.heterograph`` with canonical
edge types ``(src_type, relation, dst_type)`` whose relation names are unique; exactly one node
type, the *target type*, holds ``label`` (int64 class ids, -1 = unlabelled) and boolean
``train_mask`` / ``val_mask`` / ``test_mask`` (disjoint, labelled nodes only); a type with input
features holds ``feat`` (float32, nodes x features), a featureless type holds no ``feat`` (the
trainer gives it learnable embeddings). Node ids of a type are 0..n-1 in the source's order.
Reverse relations are ``(dst, "rev-" + relation, src)``, as DGL's distributed RGCN example
builds them for ogbn-mag.

The generator (:func:`generate_hetero`) makes a small ogbn-mag: papers (the target type; their
own features are pure noise), authors (features carrying a latent group), fields and
institutions (featureless). Relations: paper-cites-paper (uniformly random: no label signal),
author-writes-paper, paper-has_topic-field, author-affiliated_with-institution. Each paper has
a latent topic and a latent author group; its fields are drawn mostly from its topic, its
authors mostly from its group, authors' institutions mostly from their group. The label
combines both (:func:`class_factors`), so it can only be read through two relations kept apart:
one gives the topic (by field identity), the other the group (by author features or, two hops
away, institution identity); a model that mixes relations and types averages in the citation
noise and the groupless/topicless neighbours. Sizes: ``num_nodes`` papers and as many authors,
max(4 * num_classes, num_nodes / 50) fields, max(20, num_nodes / 100) institutions; per paper
about ``avg_degree`` / 2 citations, / 4 authors and / 5 fields (at least one each), per author
1.25 institutions.

The file loaders (``load_ogb_hetero``, ``load_csv_hetero``) are in
:mod:`dsgraph.data.hetero.files`, which builds on this module.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

import dgl
import numpy as np
import torch
import yaml

from dsgraph.config import DatasetConfig
from dsgraph.data.ogb import HETERO_MARKERS
from dsgraph.data.split import MASKS, random_split
from dsgraph.errors import DataError

REVERSE_PREFIX = "rev-"
Etype = tuple[str, str, str]
# Share of a paper's fields / authors (and of an author's institutions) drawn from its own
# latent topic / group; the rest is drawn uniformly (noise a model has to average out).
IN_GROUP = 0.9


def target_ntype(g: dgl.DGLGraph, required: bool = True) -> Optional[str]:
    """The node type carrying ``label``; a one-line DataError if several do, or none does and
    one is ``required`` (else None)."""
    found = [t for t in g.ntypes if "label" in g.nodes[t].data]
    if not found and not required:
        return None
    if len(found) != 1:
        raise DataError(f"heterogeneous graph: expected one node type with 'label' (the target "
                        f"type), got {found or 'none'} among node types {list(g.ntypes)}")
    return found[0]


def add_reverse_relations(g: dgl.DGLGraph) -> dgl.DGLGraph:
    """``g`` plus, for every canonical edge type (s, r, d), its edges reversed as
    (d, "rev-" + r, s); node data and the original edges' data are kept."""
    names = set(g.etypes)
    data: dict[Etype, tuple[torch.Tensor, torch.Tensor]] = {}
    for s, r, d in g.canonical_etypes:
        rev = REVERSE_PREFIX + r
        if rev in names:
            raise DataError(f"relation {r!r} ({s} -> {d}): the graph already has a relation "
                            f"{rev!r}; set dataset.add_reverse_edges to false if the file holds "
                            f"its reverse relations")
        u, v = g.edges(etype=(s, r, d))
        data[(s, r, d)] = (u, v)
        data[(d, rev, s)] = (v, u)
    out = dgl.heterograph(data, {t: g.num_nodes(t) for t in g.ntypes}, idtype=g.idtype)
    for t in g.ntypes:
        out.nodes[t].data.update(dict(g.nodes[t].data))
    for c in g.canonical_etypes:
        out.edges[c].data.update(dict(g.edges[c].data))
    return out


def assemble(edges: Mapping[Etype, tuple[np.ndarray, np.ndarray]], counts: Mapping[str, int],
             feats: Mapping[str, np.ndarray], target: str, label: np.ndarray,
             masks: Mapping[str, np.ndarray], reverse: bool) -> dgl.DGLGraph:
    """The heterograph of checked arrays in the contract's dtypes (reverse relations added if
    ``reverse``)."""
    seen: dict[str, Etype] = {}
    for c in edges:
        if c[1] in seen:  # the trainer keys per-relation weights by the relation name alone
            raise DataError(f"relation {c[1]!r} names two edge types, {seen[c[1]]} and {c}; "
                            f"expected relation names unique across the graph")
        seen[c[1]] = c
    g = dgl.heterograph({c: (torch.from_numpy(np.asarray(s, dtype=np.int64)),
                             torch.from_numpy(np.asarray(d, dtype=np.int64)))
                         for c, (s, d) in edges.items()},
                        {t: int(n) for t, n in counts.items()}, idtype=torch.int64)
    for t, f in feats.items():
        g.nodes[t].data["feat"] = torch.from_numpy(np.ascontiguousarray(f, dtype=np.float32))
    g.nodes[target].data["label"] = torch.from_numpy(np.asarray(label, dtype=np.int64))
    for key in MASKS:
        g.nodes[target].data[key] = torch.from_numpy(np.asarray(masks[key]).astype(bool))
    return add_reverse_relations(g) if reverse else g


def is_hetero_ogb(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` is an OGB folder in the heterogeneous (ogbn-mag) layout."""
    if not path:
        return False
    raw = Path(path) / "raw"
    return any((raw / marker).exists() for marker in HETERO_MARKERS)


def is_hetero_csv(path: str | os.PathLike | None) -> bool:
    """Whether ``path`` is a DGL CSV folder whose ``meta.yaml`` lists several node or edge
    types (an unreadable one is left to the homogeneous loader to report)."""
    meta_path = Path(path) / "meta.yaml" if path else None
    if meta_path is None or not meta_path.is_file():
        return False
    try:
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return False
    return isinstance(meta, dict) and any(isinstance(meta.get(k), list) and len(meta[k]) > 1
                                          for k in ("node_data", "edge_data"))


# --- the generator ------------------------------------------------------------------------

def class_factors(num_classes: int) -> tuple[int, int]:
    """(topics, author groups) of the generated graph: the most balanced factorisation
    ``topics * groups == num_classes`` (label = topic * groups + group); for a prime count,
    ``(num_classes, 2)`` and label = (topic + group) mod num_classes."""
    groups = max((d for d in range(2, int(num_classes ** 0.5) + 1) if num_classes % d == 0),
                 default=0)
    return (num_classes // groups, groups) if groups else (num_classes, 2)


def hetero_label(topic: np.ndarray, group: np.ndarray, num_classes: int) -> np.ndarray:
    """The class of a paper with latent ``topic`` and author ``group`` (see class_factors)."""
    topics, groups = class_factors(num_classes)
    if topics * groups == num_classes:
        return topic * groups + group
    return (topic + group) % num_classes


def _members(latent: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids sorted by latent class, each class's first position and count (for drawing)."""
    order = np.argsort(latent, kind="stable")
    count = np.bincount(latent, minlength=size)
    return order, np.cumsum(count) - count, count


def _balanced(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """Latent classes for ``n`` entities, as equal as can be, in random order (none empty if
    ``n >= size``)."""
    return rng.permutation(np.arange(n) % size)


def _draw(rng: np.random.Generator, want: np.ndarray, members: tuple, total: int) -> np.ndarray:
    """For each entry of ``want`` (a latent class), an entity of that class with probability
    IN_GROUP, else any of the ``total``."""
    order, start, count = members
    inside = order[start[want] + (rng.random(want.size) * count[want]).astype(np.int64)]
    anywhere = rng.integers(0, total, want.size)
    return np.where(rng.random(want.size) < IN_GROUP, inside, anywhere)


def _unique_pairs(src: np.ndarray, dst: np.ndarray, n_dst: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs without duplicates (a paper lists an author or field once)."""
    key = np.unique(src.astype(np.int64) * n_dst + dst)
    return key // n_dst, key % n_dst


def _fanout(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    """Per entity, 1 + Poisson(mean - 1) partners (at least one, ``mean`` on average)."""
    return 1 + rng.poisson(max(mean - 1.0, 0.0), n)


def generate_hetero(cfg: DatasetConfig) -> dgl.DGLGraph:
    """A synthetic heterogeneous graph (see the module docstring), deterministic per
    ``cfg.seed``; ``cfg.num_nodes`` papers, other types sized relative to it."""
    rng = np.random.default_rng(cfg.seed)
    n, k, dim = cfg.num_nodes, cfg.num_classes, cfg.feat_dim
    topics, groups = class_factors(k)
    n_author = max(n, groups)
    n_field = max(4 * k, n // 50)  # >= 4 per topic: topic is learnable from field identity
    n_inst = max(20, 2 * groups, n // 100)
    topic, group = rng.integers(0, topics, n), rng.integers(0, groups, n)
    label = hetero_label(topic, group, k)
    author_group = _balanced(rng, n_author, groups)
    field_topic = _balanced(rng, n_field, topics)
    inst_group = _balanced(rng, n_inst, groups)

    # cites: uniform, no self-loops; carries no label signal (noise for a mixing model)
    m = max(1, int(round(n * cfg.avg_degree / 2)))
    src = rng.integers(0, n, m)
    cites = _unique_pairs(src, (src + 1 + rng.integers(0, n - 1, m)) % n, n)
    papers = np.repeat(np.arange(n), _fanout(rng, n, cfg.avg_degree / 4))
    authors = _draw(rng, group[papers], _members(author_group, groups), n_author)
    writes = _unique_pairs(authors, papers, n)
    papers = np.repeat(np.arange(n), _fanout(rng, n, cfg.avg_degree / 5))
    fields = _draw(rng, topic[papers], _members(field_topic, topics), n_field)
    has_topic = _unique_pairs(papers, fields, n_field)
    people = np.repeat(np.arange(n_author), _fanout(rng, n_author, 1.25))
    insts = _draw(rng, author_group[people], _members(inst_group, groups), n_inst)
    affiliated = _unique_pairs(people, insts, n_inst)

    paper_feat = rng.standard_normal((n, dim), dtype=np.float32)  # no class signal of its own
    mu = np.float32(cfg.feat_signal) * rng.standard_normal((groups, dim), dtype=np.float32)
    author_feat = rng.standard_normal((n_author, dim), dtype=np.float32)
    author_feat += mu[author_group]  # feat_signal * mu[group] + N(0, 1), as synthetic.py
    masks = random_split(n, (cfg.train_frac, cfg.val_frac, cfg.test_frac),
                         int(rng.integers(0, 2 ** 31)))
    edges = {("paper", "cites", "paper"): cites, ("author", "writes", "paper"): writes,
             ("paper", "has_topic", "field"): has_topic,
             ("author", "affiliated_with", "institution"): affiliated}
    counts = {"paper": n, "author": n_author, "field": n_field, "institution": n_inst}
    reverse = cfg.add_reverse_edges is not False  # "auto" and True
    return assemble(edges, counts, {"paper": paper_feat, "author": author_feat}, "paper", label,
                    masks, reverse)
