"""Static files with content-hashed names, pre-compressed (gzip), served by WhiteNoise with a one-year immutable
cache: a page's scripts and styles are fetched once per version and never revalidated.

``collectstatic`` (scripts/up and the image build run it) writes the hashed and ``.gz`` copies and the manifest.
Pages then link the hashed names — with ``AUDIT_DEBUG=1`` too, so a development server measures what production
serves. Where nothing was collected (the test suite, a fresh checkout running ``manage.py runserver``) a name
missing from the manifest falls back to its plain URL, served uncompressed from ``static/`` by the finders.
"""

from __future__ import annotations

from django.contrib.staticfiles.storage import StaticFilesStorage
from whitenoise.storage import CompressedManifestStaticFilesStorage


class HashedCompressedStaticFiles(CompressedManifestStaticFilesStorage):
    manifest_strict = False

    def url(self, name, force=False):
        try:
            return super().url(name, force=True)
        except ValueError:  # not collected: the file is served under its plain name
            return StaticFilesStorage.url(self, name)
