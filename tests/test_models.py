"""laraq.bus.models: Laravel's default table names (checked against Laravel's own Str), restoring a command's
models and enums, and the missing-model error text."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from laraq.app import App
from laraq.bus.models import ModelLoader, ModelNotFoundError, default_table, restore_command
from laraq.protocol.serializer import ModelIdentifier, PHPEnum, PHPObject

_WORDS = ("Post User Category BlogPost Person Child Status Address Box Church Wish Company Day Key Analysis Quiz "
         "Index Sheep Fish Data Equipment Movie OrderItem UserHTTPLog Hero Leaf Knife Life Bus Tax Photo Video "
         "Mouse Criterion Medium Series News Campus Virus Ox Tooth Foot Man Woman Goose Cactus Thesis Crisis "
         "Wife Half Shelf Wolf Calf Loaf Zoo Radio Potato Echo Piano Memo Datum Matrix Vertex Axis Bacterium "
         "Focus Fungus Stimulus Syllabus Alumnus Audio Police Feedback Metadata Software Emoji invoice")
WORDS = _WORDS.split()

PHP_TABLES = """<?php
require '/usr/share/php/Illuminate/autoload.php';
$out = [];
foreach (json_decode(stream_get_contents(STDIN)) as $n) {
    $out[$n] = Illuminate\\Support\\Str::snake(Illuminate\\Support\\Str::pluralStudly(class_basename($n)));
}
echo json_encode($out);
"""


def test_default_table_is_laravels(php: str, tmp_path: Path) -> None:
    script = tmp_path / "tables.php"
    script.write_text(PHP_TABLES)
    names = ["App\\Models\\" + w for w in WORDS]
    expected = json.loads(subprocess.run([php, str(script)], input=json.dumps(names), capture_output=True,
                                         text=True, check=True).stdout)
    assert {n: default_table(n) for n in names} == expected


def loader(tmp_path: Path, app: App) -> ModelLoader:
    db = tmp_path / "db.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE blog_posts (id INTEGER PRIMARY KEY, title TEXT)")
    conn.execute("CREATE TABLE people (uuid TEXT PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO blog_posts VALUES (?, ?)", [(1, "a"), (2, "b"), (5, "e")])
    conn.execute("INSERT INTO people VALUES ('u-1', 'Ann')")
    conn.commit()
    conn.close()
    return ModelLoader(lambda name: sqlite3.connect(db, check_same_thread=False), app.model_schemas)


def command(**props: Any) -> PHPObject:
    return PHPObject("App\\Jobs\\X", props)


def test_restore_models_collections_and_enums(tmp_path: Path) -> None:
    app = App()
    app.model("App\\Models\\Human", table="people", key="uuid")
    status = app.enum("App\\Enums\\Status", {"Active": "active", "Archived": "archived"})
    level = app.enum("App\\Enums\\Level", {"Low": 1, "High": 3})
    cmd = command(
        post=ModelIdentifier("App\\Models\\BlogPost", 2).to_php(),
        posts=ModelIdentifier("App\\Models\\BlogPost", [5, 9, "1"]).to_php(),
        none=ModelIdentifier("App\\Models\\BlogPost", []).to_php(),
        human=ModelIdentifier("App\\Models\\Human", "u-1").to_php(),
        status=PHPEnum("App\\Enums\\Status", "Archived"),
        nested={"levels": [PHPEnum("App\\Enums\\Level", "High")], "other": PHPEnum("App\\Enums\\Other", "X")},
    )
    out = restore_command(cmd, loader(tmp_path, app), app.enums)
    assert out.post.title == "b" and out.post["id"] == 2 and out.post.key == 2
    assert [p.title for p in out.posts] == ["e", "a"]  # key order, the missing one dropped
    assert out.none == []
    assert out.human.name == "Ann" and out.human.table == "people"
    assert out.status is status.Archived and out.status == "archived" and str(out.status) == "archived"
    assert out.nested["levels"] == [level.High] and out.nested["levels"][0].value == 3
    assert out.nested["other"] == PHPEnum("App\\Enums\\Other", "X")  # undeclared: unchanged
    assert cmd.post.class_name == ModelIdentifier.CLASS  # the original command is left as it was


def test_missing_model_is_laravels_exception(tmp_path: Path) -> None:
    cmd = command(post=ModelIdentifier("App\\Models\\BlogPost", 7).to_php())
    with pytest.raises(ModelNotFoundError) as err:
        restore_command(cmd, loader(tmp_path, App()), {})
    assert str(err.value) == "No query results for model [App\\Models\\BlogPost]."
    assert err.value.php_class == "Illuminate\\Database\\Eloquent\\ModelNotFoundException"
    with pytest.raises(RuntimeError, match="no database is configured"):
        restore_command(cmd, None, {})


def test_enum_declarations_are_checked() -> None:
    app = App()
    with pytest.raises(ValueError, match="all strings or all integers"):
        app.enum("App\\Enums\\Mixed", {"A": "a", "B": 2})
    app.enum("App\\Enums\\Status", {"Active": "active"})
    with pytest.raises(ValueError, match="has no case 'Gone'"):
        restore_command(command(s=PHPEnum("App\\Enums\\Status", "Gone")), None, app.enums)


@pytest.mark.parametrize("server_name", ["mariadb", "postgres"])
def test_models_load_through_the_apps_mysql_and_postgres_settings(server_name: str,
                                                                  request: pytest.FixtureRequest) -> None:
    """The same restore through the app's ``DB_*`` settings on a real MariaDB and PostgreSQL server."""
    from laraq.config.settings import LaravelSettings
    from laraq.stores.failed import connect_database

    server = request.getfixturevalue(server_name)
    conn = server.connect()
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS blog_posts")
        cur.execute("CREATE TABLE blog_posts (id INTEGER PRIMARY KEY, title VARCHAR(20))")
        cur.execute("INSERT INTO blog_posts (id, title) VALUES (1, 'a'), (2, 'b')")
    conn.commit()
    conn.close()
    settings = LaravelSettings.from_env({"APP_NAME": "Laravel", **server.env}, version="12")
    loader = ModelLoader(lambda name: connect_database(settings.database(name)))
    connection = server.env["DB_CONNECTION"]
    out = restore_command(command(
        post=ModelIdentifier("App\\Models\\BlogPost", 2, connection=connection).to_php(),
        posts=ModelIdentifier("App\\Models\\BlogPost", [2, 7, 1]).to_php(),
    ), loader, {})
    assert out.post.title == "b" and [p.title for p in out.posts] == ["b", "a"]
    with pytest.raises(ModelNotFoundError):
        restore_command(command(post=ModelIdentifier("App\\Models\\BlogPost", 9).to_php()), loader, {})
