"""The Textual cockpit. Imports textual and rich, never torch: it must open fast and
survive a broken CUDA install on the box it watches."""
