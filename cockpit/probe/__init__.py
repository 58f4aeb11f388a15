"""``cockpit probe``: an unmodified training script, measured phase by phase from outside.

Two sides, one pipe between them:

- :mod:`.runner`, inside the run process (``python -m cockpit.pilot RUN_DIR``, run kind ``probe``):
  starts the user's command as its own child, relays what the instrumentation reports into
  ``events.jsonl`` and judges how the script ended (:mod:`.judge`), then runs the resume
  command and compares it with the uninterrupted script (:mod:`.resume`);
- :mod:`.observer` (built on :mod:`.bounds`, :mod:`.training`, :mod:`.saving` and :mod:`.evaluation`)
  and :mod:`.instrument`, inside the script's own interpreter: started before the
  script by :mod:`.boot` (a ``sitecustomize`` on ``PYTHONPATH``) as soon as the script imports torch,
  they watch PyTorch's global hooks and measure each phase within the pilot's bounds
  (``cockpit.pilot.meter``).

Nothing here imports textual; the instrumentation keeps to torch, psutil and Cockpit's event schema.
"""
