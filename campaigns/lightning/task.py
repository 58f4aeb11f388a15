"""A Lightning module and data module (model.py, written for Lightning, not for Cockpit) as a Cockpit task."""

from model import LitClassifier, SensorData

from cockpit.integrations.lightning import lightning_task

task = lightning_task(
    lambda p: LitClassifier(hidden=p["hidden"], lr=p["lr"]),  # the variant's parameters reach the module
    SensorData,
    kind="classification",
    label_names=["low", "mid", "high"],
)
