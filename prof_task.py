import cProfile, json, os, pstats, sys, time
import sqlalchemy as sa
url = "postgresql+psycopg://postgres@/proft?host=/tmp&port=55432"
admin = sa.create_engine("postgresql+psycopg://postgres@/postgres?host=/tmp&port=55432", isolation_level="AUTOCOMMIT")
with admin.connect() as c:
    c.execute(sa.text("DROP DATABASE IF EXISTS proft")); c.execute(sa.text("CREATE DATABASE proft"))
os.environ["MEDIA_USAGE_DATABASE_URL"] = url
os.environ["MEDIA_USAGE_BROKER_URL"] = "redis://127.0.0.1:56379/0"
from repository.migrate import upgrade
from repository.db import create_engine
from repository.activation import activate
from repository.sample_content import create_sample_collections, write_entries
from domain.sample_content import sample_entries
upgrade(url); e = create_engine(url); create_sample_collections(e); activate(e)
write_entries(e, sample_entries(600))
with e.connect() as c:
    items = c.execute(sa.text("SELECT collection_id, content_id, work_version FROM _emdash_media_usage_work")).all()
from tasks.work import process_work
from repository.processor import process_work_item
half = len(items)//2
t = time.perf_counter()
for it in items[:half]:
    process_work_item(e, collection_id=it[0], content_id=it[1], work_version=it[2])
print("plain process_work_item ms/item", (time.perf_counter()-t)/half*1000)
pr = cProfile.Profile(); t = time.perf_counter()
if os.environ.get("PROF"): pr.enable()
for it in items[half:]:
    process_work(*it)
pr.disable()
print("task ms/item", (time.perf_counter()-t)/(len(items)-half)*1000)
if os.environ.get("PROF"): pstats.Stats(pr).sort_stats("cumulative").print_stats(30)
