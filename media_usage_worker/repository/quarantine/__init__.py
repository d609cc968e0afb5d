"""The clean-up: the unused listing, retirement behind the fence, the quarantine's rows, the
purge and its final sweep, and the audit of who did what."""
