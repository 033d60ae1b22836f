"""Preparation and post-execution stages: fetch artefacts, stage them, ship the trained model.
They mark their phases with the markers only (download_dataset, download_model, upload)."""
