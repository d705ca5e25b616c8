from django.db import migrations, models


def backfill(apps, schema_editor):
    """Live views merged before ranks existed held one process's steps: rank 0's."""
    LiveRun = apps.get_model("live", "LiveRun")
    for live in LiveRun.objects.exclude(steps=[]).only("id", "steps").iterator():
        LiveRun.objects.filter(pk=live.pk).update(ranks={"0": list(live.steps)})


class Migration(migrations.Migration):
    dependencies = [
        ("live", "0003_live_verdict"),
    ]

    operations = [
        migrations.AddField(
            model_name="liverun",
            name="ranks",
            field=models.JSONField(default=dict),
        ),
        migrations.AddField(
            model_name="livesegment",
            name="rank",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
