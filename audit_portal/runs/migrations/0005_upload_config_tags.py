# Config and tags given with an upload (issue 28): stored on the upload and on a resumable upload's session

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0004_merge_client_declarations_upload_session"),
    ]

    operations = [
        migrations.AddField(
            model_name="upload",
            name="config",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="upload",
            name="tags",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="uploadsession",
            name="config",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="uploadsession",
            name="tags",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
