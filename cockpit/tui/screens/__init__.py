"""Screens own their behaviour: campaign, run, data, device, help, dialogs (base, series, edits, gate detail)."""
