"""Connectors: external systems LakeSync polls in (ingest sources), reads on demand (``source=`` pulls) and acts on
(actions). :mod:`lakesync.connectors.base` holds the ports every connector type implements."""
