"""Session tools (seed 002): agents list, read, message and spawn sessions.

``keys`` resolves the key shapes callers use; ``catalog`` reads sessions as
rows and transcripts; ``tools`` are the tools; ``agent_to_agent`` runs a
``sessions_send`` exchange; ``delegation`` sees a ``sessions_spawn`` child
through to its announce; ``policy`` is the send policy and the sink that
enforces it; ``access`` is sandbox visibility and the sub-agent tool set.
"""
