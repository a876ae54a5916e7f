"""Providers and their contract: ``Cloud``/``Provisioner`` (``base``), the catalog of
offerings, billing rules and GPU checks; one folder per provider (docs/providers.md). The
pipeline, solver and CLI use the names below."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyd import face

_FACE = {
    "Cloud": "base",
    "Catalog": "catalog",
    "ClusterHandle": "base",
    "FEATURE_FIELDS": "base",
    "IMPLEMENTED": "catalog",
    "LogFn": "base",
    "NODE_PREEMPTED": "base",
    "NODE_RUNNING": "base",
    "NODE_STOPPED": "base",
    "NODE_TERMINATED": "base",
    "Offering": "offering",
    "PartialHandle": "base",
    "ProvisionRequest": "base",
    "Provisioner": "base",
    "catalog_fetchers": "catalog_refresh",
    "close_clouds": "base",
    "get_cloud": "base",
    "load_catalog": "catalog",
    "loaded_clouds": "base",
    "minimum_charge": "billing",
    "refresh_catalog": "catalog_refresh",
    "registered_clouds": "base",
    "requested_features": "base",
    "unsupported": "config_support",
    "warning_lines": "config_support",
}
__all__ = [
    "Cloud", "Catalog", "ClusterHandle", "FEATURE_FIELDS", "IMPLEMENTED", "LogFn", "NODE_PREEMPTED",
    "NODE_RUNNING", "NODE_STOPPED", "NODE_TERMINATED", "Offering", "PartialHandle",
    "ProvisionRequest", "Provisioner", "catalog_fetchers", "close_clouds", "get_cloud",
    "load_catalog", "loaded_clouds", "minimum_charge", "refresh_catalog",
    "registered_clouds", "requested_features", "unsupported", "warning_lines", "gpucheck",
]
__getattr__ = face.lazy(__name__, _FACE)

if TYPE_CHECKING:
    from skyd.clouds.base import (
        FEATURE_FIELDS,
        NODE_PREEMPTED,
        NODE_RUNNING,
        NODE_STOPPED,
        NODE_TERMINATED,
        Cloud,
        ClusterHandle,
        LogFn,
        PartialHandle,
        Provisioner,
        ProvisionRequest,
        close_clouds,
        get_cloud,
        loaded_clouds,
        registered_clouds,
        requested_features,
    )
    from skyd.clouds.billing import minimum_charge
    from skyd.clouds.catalog import IMPLEMENTED, Catalog, load_catalog
    from skyd.clouds.catalog_refresh import catalog_fetchers, refresh_catalog
    from skyd.clouds.config_support import unsupported, warning_lines
    from skyd.clouds.offering import Offering
