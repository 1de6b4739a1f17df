"""Layer 1, infrastructure as data: GPUs, instances, UltraServers, fabrics, storage, models, topology."""

from fmstack.catalog.loader import Catalog, load_catalog
from fmstack.catalog.schema import GPU, MLA, Fabric, Instance, ModelArch, MoE, StorageTier, UltraServer

__all__ = [
    "GPU",
    "MLA",
    "Catalog",
    "Fabric",
    "Instance",
    "MoE",
    "ModelArch",
    "StorageTier",
    "UltraServer",
    "load_catalog",
]
