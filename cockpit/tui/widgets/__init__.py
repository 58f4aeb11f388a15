"""Widgets that own their rendering: charts, the gate table, the device panel."""
