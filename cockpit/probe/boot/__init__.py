"""The folder ``cockpit probe`` puts first on the script's ``PYTHONPATH``: it holds only ``sitecustomize``."""
