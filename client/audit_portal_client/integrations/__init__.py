"""Trainer integrations: TRL (:mod:`.trl`), verl (:mod:`.verl`)."""
