"""Runs and uploads stored before config was kept flat (a client's run start accepted nested sections) get the same
dotted keys runs/declarations.py gives new ones, so the runs table, its search and the params diff see one shape."""

from django.db import migrations


def _flat(config, prefix=""):
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def flatten(apps, schema_editor):
    for name in ("Run", "Upload"):
        model = apps.get_model("runs", name)
        for row in model.objects.exclude(config=None).exclude(config={}).only("pk", "config").iterator():
            if isinstance(row.config, dict) and any(isinstance(v, dict) for v in row.config.values()):
                model.objects.filter(pk=row.pk).update(config=_flat(row.config))


class Migration(migrations.Migration):
    dependencies = [("runs", "0005_upload_config_tags")]

    operations = [migrations.RunPython(flatten, migrations.RunPython.noop)]
