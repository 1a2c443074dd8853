"""The voice models the TTS engine runs: each adapts one family's runners to
`engine/voices.py: VoiceModel`, so that nothing above names a family.
"""
