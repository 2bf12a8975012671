"""Your own hardware (chapter 27): :func:`register` adds an accelerator, the links of its node
and the node, from a dict or a YAML/JSON file; :func:`unregister` removes them and
:func:`registered` lists them. The entries go into the tables of the other modules of
:mod:`dtbook.hardware` themselves, so every lookup, and the planner, then knows them.
"""

from __future__ import annotations

import numpy as np

from .catalog import _ACCELERATORS, _LINKS, Accelerator, Link, _key
from .hierarchy import _NODES, Node
from .measured import (_ATTENTION, _CEILINGS, _CEILINGS_FP8, _MEMORY, AttentionKernel,
                       MatmulCeiling, MemoryCeiling)

__all__ = ["register", "unregister", "registered"]


# ---------------------------------------------------------------------- your own hardware
# Chapter 27: a capacity engineer plans on hardware the catalog does not hold. ``register``
# adds an accelerator (with the measured rates the planner needs), the links of its node and
# the node, from a dict or a YAML/JSON file; ``dtbook plan --accelerator FILE`` calls it.

_BUILTIN = (frozenset(_ACCELERATORS), frozenset(_LINKS), frozenset(_NODES))
_REGISTERED: dict = {}      # accelerator name -> (node name or None, [link names])

_SPEC_KEYS = ("accelerator", "links", "node")
_ACC_KEYS = ("name", "peak_flops", "hbm_bytes", "hbm_bandwidth", "source", "note",
             "matmul_ceiling", "memory_ceiling", "attention_kernel")
_LINK_KEYS = ("name", "alpha", "beta", "source", "alpha_source", "note")
_NODE_KEYS = ("name", "gpus", "scale_up", "scale_out", "nics", "host_link", "host_memory",
              "host_memory_bandwidth", "source", "note")
_DIMENSION = {"bytes": "bytes, such as '80 GiB'", "bytes/s": "bytes/s, such as '3.35 TB/s'",
              "flop/s": "FLOP/s, such as '989.4 TFLOP/s'", "seconds": "seconds, such as '2 us'"}


def _quantity(where, value, dimension):
    """``value`` (a number in SI base units, or a string with its unit) as a positive finite
    float of ``dimension``; ``ValueError`` naming ``where`` otherwise."""
    from ..units import parse_quantity
    if isinstance(value, str):
        try:
            q = parse_quantity(value)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        if q.dimension not in (dimension, "1"):
            raise ValueError(f"{where}: {value!r} is {q.dimension}, expected "
                             f"{_DIMENSION[dimension]}")
        value = q.value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where} must be a number in {_DIMENSION[dimension]}, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be finite and > 0, got {value!r}")
    return value


def _count(where, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{where} must be a whole number >= 1, got {value!r}")
    return int(value)


def _text(where, value, required=True):
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _table(where, value, keys, required=()):
    """``value`` as a dict whose keys are among ``keys`` and include ``required``."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping of {', '.join(keys)}; got {value!r}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}; known fields: {', '.join(keys)}")
    for k in required:
        if k not in value:
            raise ValueError(f"{where}.{k} is missing (required: {', '.join(required)})")
    return value


def _new_name(where, value, taken, kind):
    name = _key(_text(where, value))
    if any(c.isspace() for c in name):
        raise ValueError(f"{where} must not contain spaces, got {value!r}")
    if name in taken:
        raise ValueError(f"{where}: {name!r} is a catalog {kind} of dtbook.hardware; "
                         f"choose another name")
    return name


def _load(spec):
    """A spec given as a dict, or a path to a .json/.yaml/.yml file, as a dict."""
    import os
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as err:
            raise ValueError(f"accelerator file {path!r} cannot be read: {err.strerror}") from None
        if path.lower().endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:   # pragma: no cover - PyYAML ships with Jupyter
                raise ValueError("accelerator file: reading YAML needs PyYAML "
                                 "(pip install pyyaml); or write the file as JSON") from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as err:
                raise ValueError(f"accelerator file {path!r} is not valid YAML: {err}") from None
        else:
            import json
            try:
                data = json.loads(text)
            except json.JSONDecodeError as err:
                raise ValueError(f"accelerator file {path!r} is not valid JSON: {err}") from None
        return data, f"registered from {os.path.basename(path)}"
    return spec, "registered from a dict"


def register(spec) -> Accelerator:
    """Add your own accelerator to the catalog, with its node and links (chapter 27).

    ``spec`` is a dict, or the path of a JSON or YAML file holding one, with the keys
    ``accelerator`` (required), ``links`` (a list of new links) and ``node``::

        accelerator:
          name: my-gpu
          peak_flops: {bf16: 989.4 TFLOP/s, fp8: 1978.9 TFLOP/s}   # dense
          hbm_bytes: 80 GiB
          hbm_bandwidth: 3.35 TB/s
          source: the datasheet and the benchmarks below
          # measured rates: the planner needs all three (dtbook.plan times kernels at them)
          matmul_ceiling: {bf16: 792 TFLOP/s, fp8: 1400 TFLOP/s, sms: 132}
          memory_ceiling: {triad: 2.97 TB/s, copy: 2.90 TB/s}
          attention_kernel: {forward: 335 TFLOP/s, backward: 335 TFLOP/s, kernel: FlashAttention-2}
        links:
          - {name: my-link, alpha: 1 us, beta: 450 GB/s}     # beta per direction
        node:
          name: my-node
          gpus: 8
          scale_up: my-link                                  # a link above or in the catalog
          scale_out: ib-ndr400
          nics: 8

    Figures are numbers in SI base units or strings with a unit (``"80 GiB"``, ``"3.35 TB/s"``,
    ``"1 us"``). Every field is checked before anything is added; a bad one raises
    ``ValueError`` naming it (``accelerator.hbm_bytes``, ``node.scale_up``, ...). Names are
    spelt as :func:`get` spells them and must not be catalog names; registering a name you
    registered before replaces it. Returns the :class:`Accelerator`; :func:`get`,
    :func:`node`, :func:`matmul_ceiling`, :func:`memory_ceiling`, :func:`attention_kernel` and
    the planner (``gpu=`` its name) then know it, until :func:`unregister`."""
    data, origin = _load(spec)
    _table("spec", data, _SPEC_KEYS, required=("accelerator",))
    a = _table("accelerator", data["accelerator"], _ACC_KEYS,
               required=("name", "peak_flops", "hbm_bytes", "hbm_bandwidth"))
    acc_names, link_names, node_names = _BUILTIN
    name = _new_name("accelerator.name", a["name"], acc_names | link_names, "name")
    source = _text("accelerator.source", a.get("source", origin))
    peaks = a["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ValueError(f"accelerator.peak_flops must map dtypes to FLOP/s, such as "
                         f"{{bf16: '989.4 TFLOP/s'}}; got {peaks!r}")
    peak_flops = {_text("accelerator.peak_flops", d).lower(): _quantity(f"accelerator.peak_flops.{d}", v, "flop/s")
                  for d, v in peaks.items()}
    acc = Accelerator(name=name, peak_flops=peak_flops,
                      hbm_bytes=_quantity("accelerator.hbm_bytes", a["hbm_bytes"], "bytes"),
                      hbm_bandwidth=_quantity("accelerator.hbm_bandwidth", a["hbm_bandwidth"], "bytes/s"),
                      source=source, sources={f: source for f in ("peak_flops", "hbm_bytes", "hbm_bandwidth")},
                      note=_text("accelerator.note", a.get("note"), required=False))
    ceilings = {}
    if "matmul_ceiling" in a:
        m = _table("accelerator.matmul_ceiling", a["matmul_ceiling"], ("bf16", "fp8", "sms", "source"),
                   required=("bf16", "sms"))
        sms = _count("accelerator.matmul_ceiling.sms", m["sms"])
        msrc = _text("accelerator.matmul_ceiling.source", m.get("source", source))
        for dtype, table in (("bf16", _CEILINGS), ("fp8", _CEILINGS_FP8)):
            if dtype in m:
                flops = _quantity(f"accelerator.matmul_ceiling.{dtype}", m[dtype], "flop/s")
                ceilings[id(table)] = (table, MatmulCeiling(name, flops, (), sms, msrc, dtype=dtype))
    if "memory_ceiling" in a:
        m = _table("accelerator.memory_ceiling", a["memory_ceiling"], ("triad", "copy", "source"),
                   required=("triad",))
        triad = _quantity("accelerator.memory_ceiling.triad", m["triad"], "bytes/s")
        copy = _quantity("accelerator.memory_ceiling.copy", m.get("copy", triad), "bytes/s")
        ceilings[id(_MEMORY)] = (_MEMORY, MemoryCeiling(
            name, triad, copy, _text("accelerator.memory_ceiling.source", m.get("source", source))))
    if "attention_kernel" in a:
        m = _table("accelerator.attention_kernel", a["attention_kernel"],
                   ("forward", "backward", "kernel", "source"), required=("forward", "backward"))
        ceilings[id(_ATTENTION)] = (_ATTENTION, AttentionKernel(
            name, _text("accelerator.attention_kernel.kernel", m.get("kernel", "fused attention")),
            _quantity("accelerator.attention_kernel.forward", m["forward"], "flop/s"),
            _quantity("accelerator.attention_kernel.backward", m["backward"], "flop/s"),
            _text("accelerator.attention_kernel.source", m.get("source", source))))
    new_links = {}
    raw_links = data.get("links", [])
    if not isinstance(raw_links, list):
        raise ValueError(f"links must be a list of links, got {raw_links!r}")
    for i, raw in enumerate(raw_links):
        where = f"links[{i}]"
        ln = _table(where, raw, _LINK_KEYS, required=("name", "alpha", "beta"))
        lname = _new_name(f"{where}.name", ln["name"], acc_names | link_names | {name}, "name")
        lsrc = _text(f"{where}.source", ln.get("source", source))
        new_links[lname] = Link(name=lname, alpha=_quantity(f"{where}.alpha", ln["alpha"], "seconds"),
                                beta=_quantity(f"{where}.beta", ln["beta"], "bytes/s"), source=lsrc,
                                alpha_source=_text(f"{where}.alpha_source", ln.get("alpha_source", lsrc)),
                                note=_text(f"{where}.note", ln.get("note"), required=False))
    nd = None
    if data.get("node") is not None:
        n = _table("node", data["node"], _NODE_KEYS, required=("name", "gpus", "scale_up", "scale_out"))
        nname = _new_name("node.name", n["name"], node_names, "node")
        known = {k for k in _LINKS if k not in _owned_links(name)} | set(new_links)
        ups = {}
        for f in ("scale_up", "scale_out", "host_link"):
            if f == "host_link" and f not in n:
                continue
            ups[f] = _key(_text(f"node.{f}", n[f]))
            if ups[f] not in known:
                raise ValueError(f"node.{f}: unknown link {n[f]!r}; links: {', '.join(sorted(known))}")
        gpus = _count("node.gpus", n["gpus"])
        nsrc = _text("node.source", n.get("source", source))
        nd = Node(name=nname, gpus=gpus, accelerator=name, scale_up=ups["scale_up"],
                  scale_out=ups["scale_out"], nics=_count("node.nics", n.get("nics", gpus)),
                  host_link=ups.get("host_link", ""),
                  host_memory=(_quantity("node.host_memory", n["host_memory"], "bytes")
                               if "host_memory" in n else None),
                  host_memory_bandwidth=(_quantity("node.host_memory_bandwidth",
                                                   n["host_memory_bandwidth"], "bytes/s")
                                         if "host_memory_bandwidth" in n else None),
                  source=nsrc, sources={"gpus": nsrc, "nics": nsrc},
                  note=_text("node.note", n.get("note"), required=False))
        owner = next((acc_name for acc_name, (node_name, _) in _REGISTERED.items()
                      if node_name == nname and acc_name != name), None)
        if owner is not None:
            raise ValueError(f"node.name: {nname!r} is already registered with accelerator {owner!r}")
    for lname in new_links:
        owner = next((acc_name for acc_name, (_, owned) in _REGISTERED.items()
                      if lname in owned and acc_name != name), None)
        if owner is not None:
            raise ValueError(f"links: {lname!r} is already registered with accelerator {owner!r}")
    # every field checked: replace what this name registered before, then add
    if name in _REGISTERED:
        unregister(name)
    _ACCELERATORS[name] = acc
    for table, entry in ceilings.values():
        table[name] = entry
    _LINKS.update(new_links)
    if nd is not None:
        _NODES[nd.name] = nd
    _REGISTERED[name] = (nd.name if nd is not None else None, list(new_links))
    return acc


def _owned_links(name):
    return _REGISTERED.get(name, (None, []))[1]


def unregister(name: str) -> None:
    """Remove an accelerator added with :func:`register`, with its node and links (chapter
    27). ``ValueError`` for a catalog name or one that was never registered."""
    key = _key(name) if isinstance(name, str) else name
    if key not in _REGISTERED:
        raise ValueError(f"name {name!r} was not registered; registered: "
                         f"{', '.join(_REGISTERED) or 'none'}")
    node_name, link_names = _REGISTERED.pop(key)
    for table in (_ACCELERATORS, _CEILINGS, _CEILINGS_FP8, _MEMORY, _ATTENTION):
        table.pop(key, None)
    for lname in link_names:
        _LINKS.pop(lname, None)
    if node_name is not None:
        _NODES.pop(node_name, None)


def registered() -> list[str]:
    """The accelerators added with :func:`register` (chapter 27)."""
    return list(_REGISTERED)
