"""SELECT over stored rows (issue 29), checked against an independent pandas computation.

tmqgate-only (no Kafka broker has SQL over its topics). The data: 1,023,657 rows in two
supertables over 250 child tables on 4 vnodes, written through the broker's one rows write
path (real LevelDB): NULLs in columns and a tag, gaps in 30 child tables (for FILL), a fifth of
the child tables written out of time order, rows of several child tables in one entry. Each
query's answer is compared with what pandas computes from the generated frame, under
TDengine's rules (FIRST/LAST skip NULLs, LAST_ROW does not, windows aligned to the epoch, FILL
between the WHERE's bounds, ...).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.server import Broker
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SelectLimits
from tmqgate.broker.tsdb.rows import build_rows_table

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
METERS, METER_ROWS = 200, 4000
WEATHER, WEATHER_ROWS = 50, 5000
LOCATIONS = ["California.SanFrancisco", "California.LosAngeles", "California.SanDiego", "Texas.Austin",
             "Texas.Houston", None]
CITIES = ["beijing", "shanghai", "tianjin", "shenzhen", "wuhan"]
ENTRY_ROWS = 700  # rows per entry (several child tables each)


def _frames(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any], dict[str, Any]]:
    meters, weather = [], []
    meter_tags: dict[str, tuple[Any, Any]] = {}
    for i in range(METERS):
        name = f"d{i}"
        meter_tags[name] = (LOCATIONS[i % len(LOCATIONS)], i % 10 if i % 17 else None)
        ts = T0 + np.sort(rng.choice(METER_ROWS * 4, METER_ROWS, replace=False)).astype(np.int64) * 1000
        current = rng.normal(10, 3, METER_ROWS).astype(np.float32)
        voltage = rng.integers(200, 240, METER_ROWS).astype(np.float64)
        status = np.repeat(rng.integers(0, 3, METER_ROWS // 8 + 1), 8)[:METER_ROWS].astype(np.float64)
        frame = pd.DataFrame({"tbname": name, "ts": ts, "current": current, "voltage": voltage,
                              "phase": rng.random(METER_ROWS), "status": status})
        if 40 <= i < 70:  # gaps (windows with no row) for FILL: 01:00-01:30 and 02:12-02:40
            frame = frame[~frame.ts.between(T0 + 3_600_000, T0 + 5_400_000 - 1)
                          & ~frame.ts.between(T0 + 7_920_000, T0 + 9_600_000 - 1)].reset_index(drop=True)
        n = len(frame)
        frame.loc[rng.random(n) < 0.05, "current"] = np.nan
        frame.loc[rng.random(n) < 0.02, "voltage"] = np.nan
        frame.loc[rng.random(n) < 0.01, "status"] = np.nan
        meters.append(frame)
    weather_tags = {}
    for i in range(WEATHER):
        name = f"w{i}"
        weather_tags[name] = (CITIES[i % len(CITIES)],)
        ts = T0 + np.sort(rng.choice(WEATHER_ROWS * 3, WEATHER_ROWS, replace=False)).astype(np.int64) * 2000
        weather.append(pd.DataFrame({"tbname": name, "ts": ts, "temp": rng.normal(20, 8, WEATHER_ROWS),
                                     "hum": rng.integers(0, 100, WEATHER_ROWS).astype(np.float64),
                                     "ok": rng.random(WEATHER_ROWS) < 0.7}))
    m = pd.concat(meters, ignore_index=True)
    m["location"] = m.tbname.map(lambda n: meter_tags[n][0])
    m["groupid"] = m.tbname.map(lambda n: meter_tags[n][1]).astype("float64")
    w = pd.concat(weather, ignore_index=True)
    w["city"] = w.tbname.map(lambda n: weather_tags[n][0])
    return m, w, meter_tags, weather_tags


def _sql_value(v: Any) -> str:
    return "NULL" if v is None else (f"'{v}'" if isinstance(v, str) else str(v))


def _write(broker: Broker, stable: str, frame: pd.DataFrame, columns: list[str], rng: np.random.Generator) -> None:
    """Each vnode's rows in entries of ENTRY_ROWS rows mixing child tables; a fifth of the
    child tables' rows shuffled (out of time order)."""
    ex = broker.executor
    schema = broker.catalog.schema("t29", stable)
    assert schema is not None
    children = broker.store.child_tables("t29")
    frame = frame.copy()
    shuffled = {n for n in frame.tbname.unique() if int(n[1:]) % 5 == 0}
    frame["_key"] = np.where(frame.tbname.isin(shuffled), rng.random(len(frame)), 0.0)
    frame["_vnode"] = frame.tbname.map(lambda n: children[n].vnode)
    for vnode, part in frame.groupby("_vnode"):
        part = part.sort_values(["_key", "ts"])  # in time order, then the shuffled tables' rows
        for lo in range(0, len(part), ENTRY_ROWS):
            chunk = part.iloc[lo:lo + ENTRY_ROWS]
            cols = {"ts": pa.array(chunk.ts.to_numpy(), pa.int64())}
            for c in columns:
                col = schema.find(c)
                assert col is not None
                values = chunk[c]
                cols[c] = pa.array(values.to_numpy(), mask=values.isna().to_numpy()).cast(col.type.arrow)
            table = build_rows_table(schema, pa.array(chunk.tbname.to_numpy(), pa.string()), cols)
            ex.append_rows_many("t29", int(vnode), [(stable, table)])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, pd.DataFrame, pd.DataFrame]]:
    rng = np.random.default_rng(29)
    m, w, meter_tags, weather_tags = _frames(rng)
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path_factory.mktemp("select") / "data")))
    ex = broker.executor
    ex.execute("CREATE DATABASE t29 VGROUPS 4; USE t29; "
               "CREATE STABLE meters (ts TIMESTAMP, current FLOAT, voltage INT, phase DOUBLE, status TINYINT) "
               "TAGS (location VARCHAR(32), groupid INT); "
               "CREATE STABLE weather (ts TIMESTAMP, temp DOUBLE, hum SMALLINT, ok BOOL) TAGS (city NCHAR(16))")
    ex.execute("CREATE TABLE " + " ".join(f"t29.{n} USING t29.meters TAGS ({_sql_value(a)}, {_sql_value(b)})"
                                           for n, (a, b) in meter_tags.items()))
    ex.execute("CREATE TABLE " + " ".join(f"t29.{n} USING t29.weather TAGS ('{c}')"
                                           for n, (c,) in weather_tags.items()))
    _write(broker, "meters", m, ["current", "voltage", "phase", "status"], rng)
    _write(broker, "weather", w, ["temp", "hum", "ok"], rng)
    yield broker, m, w
    ex.close()
    broker.store.close()


def _run(broker: Broker, sql: str) -> dict[str, Any]:
    return asyncio.run(broker.executor.execute_async(sql, "t29")).to_json()


# --- the reference ------------------------------------------------------------------------

def _rows(df: pd.DataFrame) -> list[list[Any]]:
    out = []
    for row in df.itertuples(index=False):
        out.append([None if (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is None else
                    (v.item() if isinstance(v, np.generic) else v) for v in row])
    return out


def _first(s: pd.DataFrame, col: str) -> Any:
    s = s[s[col].notna()]
    return s.loc[s.ts.idxmin(), col] if len(s) else None


def _last(s: pd.DataFrame, col: str) -> Any:
    s = s[s[col].notna()]
    return s.loc[s.ts.idxmax(), col] if len(s) else None


def _align(ts: pd.Series | int, step: int, offset: int = 0) -> Any:
    return (ts - offset) // step * step + offset


def _windows(df: pd.DataFrame, size: int, step: int, offset: int = 0) -> pd.DataFrame:
    """Each row once per INTERVAL(size, offset) SLIDING(step) window holding it, with _wstart."""
    parts = []
    for i in range(-(-size // step)):
        start = _align(df.ts, step, offset) - i * step
        parts.append(df.assign(_wstart=start)[df.ts < start + size])
    return pd.concat(parts, ignore_index=True)


def _event_windows(df: pd.DataFrame, keys: list[str], change: Callable[[pd.DataFrame], pd.Series]) -> pd.DataFrame:
    df = df.sort_values([*keys, "ts"]) if keys else df.sort_values("ts")
    groups = df.groupby(keys, dropna=False, sort=False) if keys else [(None, df)]
    out = []
    for _, g in groups:
        g = g.copy()
        g["_wid"] = change(g).cumsum()
        out.append(g)
    return pd.concat(out, ignore_index=True)


def _state_change(col: str) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda g: (g[col] != g[col].shift()).astype(int)


def _session_change(gap: int) -> Callable[[pd.DataFrame], pd.Series]:
    return lambda g: ((g.ts - g.ts.shift()).fillna(gap + 1) > gap).astype(int)


def _fill(agg: pd.DataFrame, first: int, last: int, step: int, mode: str, cols: list[str],
          keys: list[str] | None = None, values: list[Any] | None = None) -> pd.DataFrame:
    grid_starts = np.arange(first, last + step, step)
    frames = []
    for key, g in (agg.groupby(keys) if keys else [((), agg)]):
        grid = pd.DataFrame({"_wstart": grid_starts})
        for k, v in zip(keys or [], key if isinstance(key, tuple) else (key,), strict=False):
            grid[k] = v
        j = grid.merge(g, on=[*(keys or []), "_wstart"], how="left", indicator=True)
        hit = j["_merge"] == "both"
        for i, c in enumerate(cols):
            if mode == "value":
                assert values is not None
                j.loc[~hit, c] = values[i]
            elif mode == "next":
                j[c] = np.where(hit, j[c], j[c].bfill().shift(-1))
            elif mode == "linear":
                known = j[hit & j[c].notna()]
                interp = np.interp(j._wstart, known._wstart, known[c]) if len(known) else np.nan
                outside = (j._wstart < known._wstart.min()) | (j._wstart > known._wstart.max())
                j[c] = np.where(hit, j[c], np.where(outside, np.nan, interp))
        frames.append(j.drop(columns="_merge"))
    return pd.concat(frames, ignore_index=True)


def _prev_fill(agg: pd.DataFrame, first: int, last: int, step: int, col: str) -> pd.DataFrame:
    grid = pd.DataFrame({"_wstart": np.arange(first, last + step, step)})
    j = grid.merge(agg, on="_wstart", how="left", indicator=True)
    hit = j["_merge"] == "both"
    prev = j[col].where(hit).ffill().shift()
    j[col] = np.where(hit, j[col], prev)
    return j.drop(columns="_merge")


LO = T0 + 3_600_000  # 01:00
HI = T0 + 2 * 3_600_000  # 02:00
LO_TEXT, HI_TEXT = "2024-01-01 01:00:00", "2024-01-01 02:00:00"


def _in(df: pd.DataFrame, lo: int = LO, hi: int = HI) -> pd.DataFrame:
    return df[(df.ts >= lo) & (df.ts < hi)]


def _grouped(df: pd.DataFrame, keys: list[str], **aggs: Any) -> pd.DataFrame:
    return df.groupby(keys, dropna=False).agg(**aggs).reset_index()


# Each case: (SQL, reference computation over (meters, weather), whether row order matters).
Reference = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame | list[list[Any]]]
CASES: list[tuple[str, Reference, bool]] = [
    ("SELECT COUNT(*) FROM meters", lambda m, w: [[len(m)]], True),
    ("SELECT COUNT(current), COUNT(voltage) FROM meters",
     lambda m, w: [[int(m.current.notna().sum()), int(m.voltage.notna().sum())]], True),
    (f"SELECT COUNT(*) FROM meters WHERE ts >= '{LO_TEXT}' AND ts < '{HI_TEXT}'", lambda m, w: [[len(_in(m))]], True),
    (f"SELECT COUNT(*) FROM meters WHERE ts BETWEEN {LO} AND {HI}",
     lambda m, w: [[int(((m.ts >= LO) & (m.ts <= HI)).sum())]], True),
    ("SELECT AVG(current) FROM meters WHERE groupid = 3",
     lambda m, w: [[m[m.groupid == 3].current.astype("float64").mean()]], True),
    ("SELECT SUM(voltage), MIN(voltage), MAX(voltage) FROM meters",
     lambda m, w: [[int(m.voltage.sum()), int(m.voltage.min()), int(m.voltage.max())]], True),
    ("SELECT SPREAD(current), STDDEV(voltage) FROM meters",
     lambda m, w: [[float(m.current.max()) - float(m.current.min()), m.voltage.std(ddof=0)]], True),
    ("SELECT tbname, FIRST(current), LAST(current), LAST_ROW(current) FROM meters PARTITION BY tbname",
     lambda m, w: [[n, _first(g, "current"), _last(g, "current"), g.loc[g.ts.idxmax(), "current"]]
                   for n, g in m.groupby("tbname")], False),
    ("SELECT PERCENTILE(voltage, 90) FROM d3", lambda m, w: [[np.nanpercentile(m[m.tbname == "d3"].voltage, 90)]],
     True),
    ("SELECT COUNT(*), AVG(current) FROM meters GROUP BY location",
     lambda m, w: _grouped(m, ["location"], n=("ts", "size"), a=("current", lambda s: s.astype("float64").mean()))
     .drop(columns="location"), False),
    ("SELECT location, COUNT(*) FROM meters GROUP BY location ORDER BY location",
     lambda m, w: _null_first([[k if isinstance(k, str) else None, len(g)]
                               for k, g in m.groupby("location", dropna=False)]), True),
    ("SELECT tbname, COUNT(*), MAX(current) FROM meters GROUP BY tbname ORDER BY tbname LIMIT 10",
     lambda m, w: sorted([[n, len(g), float(g.current.max())] for n, g in m.groupby("tbname")])[:10], True),
    ("SELECT groupid, MAX(voltage) FROM meters PARTITION BY groupid",
     lambda m, w: [[None if math.isnan(k) else int(k), int(g.voltage.max())]
                   for k, g in m.groupby("groupid", dropna=False)], False),
    ("SELECT COUNT(*), SUM(voltage) FROM meters WHERE tbname = 'd7'",
     lambda m, w: [[len(m[m.tbname == "d7"]), int(m[m.tbname == "d7"].voltage.sum())]], True),
    ("SELECT tbname, COUNT(*) FROM meters WHERE tbname IN ('d1', 'd2', 'd150') PARTITION BY tbname",
     lambda m, w: [[n, len(g)] for n, g in m[m.tbname.isin(["d1", "d2", "d150"])].groupby("tbname")], False),
    ("SELECT * FROM d5 ORDER BY ts LIMIT 20 OFFSET 5",
     lambda m, w: m[m.tbname == "d5"].sort_values("ts")[["ts", "current", "voltage", "phase", "status"]]
     .iloc[5:25], True),
    ("SELECT ts, tbname, voltage * current FROM meters WHERE location = 'Texas.Austin' AND current > 15 "
     "ORDER BY ts, tbname LIMIT 50",
     lambda m, w: m[(m.location == "Texas.Austin") & (m.current > 15)].sort_values(["ts", "tbname"])
     .assign(x=lambda d: d.voltage * d.current.astype("float64"))[["ts", "tbname", "x"]].iloc[:50], True),
    ("SELECT COUNT(*) FROM meters WHERE current IS NULL", lambda m, w: [[int(m.current.isna().sum())]], True),
    ("SELECT COUNT(*) FROM meters WHERE location LIKE 'California%' AND groupid IS NOT NULL",
     lambda m, w: [[int((m.location.fillna("").str.startswith("California") & m.groupid.notna()).sum())]], True),
    ("SELECT COUNT(*), AVG(phase) FROM meters WHERE voltage BETWEEN 210 AND 220 AND phase > 0.5",
     lambda m, w: [[len(s := m[(m.voltage >= 210) & (m.voltage <= 220) & (m.phase > 0.5)]), s.phase.mean()]], True),
    ("SELECT _wstart, COUNT(*), AVG(current) FROM meters INTERVAL(1m)",
     lambda m, w: _grouped(m.assign(_wstart=_align(m.ts, 60_000)), ["_wstart"], n=("ts", "size"),
                           a=("current", lambda s: s.astype("float64").mean())), True),
    (f"SELECT _wstart, _wend, _wduration, MAX(voltage) FROM meters WHERE ts >= {LO} AND ts < {HI} INTERVAL(10m, 1m)",
     lambda m, w: _grouped(_in(m).assign(_wstart=_align(_in(m).ts, 600_000, 60_000)), ["_wstart"],
                           v=("voltage", "max")).assign(e=lambda d: d._wstart + 600_000, d=600_000)
     [["_wstart", "e", "d", "v"]], True),
    (f"SELECT _wstart, COUNT(*), MIN(current) FROM meters WHERE ts >= {LO} AND ts < {HI} INTERVAL(5m) SLIDING(1m)",
     lambda m, w: _grouped(_windows(_in(m), 300_000, 60_000), ["_wstart"], n=("ts", "size"), c=("current", "min")),
     True),
    (f"SELECT _wstart, tbname, COUNT(*), LAST(voltage) FROM meters WHERE ts < {T0 + 7_200_000} AND tbname IN "
     "('d10', 'd11', 'd12') PARTITION BY tbname INTERVAL(1h)",
     lambda m, w: [[ws, n, len(g), _last(g, "voltage")] for (n, ws), g in
                   m[(m.ts < T0 + 7_200_000) & m.tbname.isin(["d10", "d11", "d12"])]
                   .assign(_wstart=lambda d: _align(d.ts, 3_600_000)).groupby(["tbname", "_wstart"])], False),
    ("SELECT _wstart, COUNT(*), AVG(current) FROM d42 WHERE ts >= '2024-01-01 00:00:00' AND ts < '2024-01-01 06:00:00' "
     "INTERVAL(7m) FILL(NULL)",
     lambda m, w: _fill(_grouped((d := m[m.tbname == "d42"]).assign(_wstart=_align(d.ts, 420_000)), ["_wstart"],
                                 n=("ts", "size"), a=("current", lambda s: s.astype("float64").mean())),
                        _align(T0, 420_000), _align(T0 + 6 * 3_600_000 - 1, 420_000), 420_000, "null", ["n", "a"]),
     True),
    ("SELECT _wstart, COUNT(*), MAX(voltage) FROM d43 WHERE ts >= '2024-01-01 00:00:00' AND ts < '2024-01-01 06:00:00' "
     "INTERVAL(11m) FILL(VALUE, 0, -1)",
     lambda m, w: _fill(_grouped((d := m[m.tbname == "d43"]).assign(_wstart=_align(d.ts, 660_000)), ["_wstart"],
                                 n=("ts", "size"), v=("voltage", "max")),
                        _align(T0, 660_000), _align(T0 + 6 * 3_600_000 - 1, 660_000), 660_000, "value", ["n", "v"],
                        values=[0, -1]), True),
    ("SELECT _wstart, AVG(voltage) FROM d44 WHERE ts >= '2024-01-01 00:00:00' AND ts < '2024-01-01 06:00:00' "
     "INTERVAL(13m) FILL(PREV)",
     lambda m, w: _prev_fill(_grouped((d := m[m.tbname == "d44"]).assign(_wstart=_align(d.ts, 780_000)),
                                      ["_wstart"], a=("voltage", "mean")),
                             _align(T0, 780_000), _align(T0 + 6 * 3_600_000 - 1, 780_000), 780_000, "a"), True),
    ("SELECT _wstart, AVG(voltage) FROM d45 WHERE ts >= '2024-01-01 00:00:00' AND ts < '2024-01-01 06:00:00' "
     "INTERVAL(13m) FILL(NEXT)",
     lambda m, w: _fill(_grouped((d := m[m.tbname == "d45"]).assign(_wstart=_align(d.ts, 780_000)),
                                 ["_wstart"], a=("voltage", "mean")),
                        _align(T0, 780_000), _align(T0 + 6 * 3_600_000 - 1, 780_000), 780_000, "next", ["a"]), True),
    ("SELECT _wstart, AVG(voltage) FROM d46 WHERE ts >= '2024-01-01 00:00:00' AND ts < '2024-01-01 06:00:00' "
     "INTERVAL(13m) FILL(LINEAR)",
     lambda m, w: _fill(_grouped((d := m[m.tbname == "d46"]).assign(_wstart=_align(d.ts, 780_000)),
                                 ["_wstart"], a=("voltage", "mean")),
                        _align(T0, 780_000), _align(T0 + 6 * 3_600_000 - 1, 780_000), 780_000, "linear", ["a"]), True),
    ("SELECT _wstart, tbname, COUNT(*) FROM meters WHERE tbname IN ('d60', 'd61') AND ts >= '2024-01-01 04:00:00' "
     "AND ts < '2024-01-01 06:00:00' PARTITION BY tbname INTERVAL(9m) FILL(VALUE, 0)",
     lambda m, w: _fill(_grouped((d := _in(m[m.tbname.isin(["d60", "d61"])], T0 + 4 * 3_600_000,
                                           T0 + 6 * 3_600_000)).assign(_wstart=_align(d.ts, 540_000)),
                                 ["tbname", "_wstart"], n=("ts", "size")),
                        _align(T0 + 4 * 3_600_000, 540_000), _align(T0 + 6 * 3_600_000 - 1, 540_000), 540_000,
                        "value", ["n"], keys=["tbname"], values=[0])[["_wstart", "tbname", "n"]], False),
    ("SELECT _wstart, _wend, COUNT(*), status FROM d8 STATE_WINDOW(status)",
     lambda m, w: [[g.ts.min(), g.ts.max(), len(g), int(g.status.iloc[0])] for _, g in
                   _event_windows(m[(m.tbname == "d8") & m.status.notna()], [], _state_change("status"))
                   .groupby("_wid")], True),
    ("SELECT tbname, _wstart, COUNT(*) FROM meters WHERE tbname IN ('d9', 'd10') PARTITION BY tbname "
     "STATE_WINDOW(status)",
     lambda m, w: [[n, g.ts.min(), len(g)] for (n, _), g in
                   _event_windows(m[m.tbname.isin(["d9", "d10"]) & m.status.notna()], ["tbname"],
                                  _state_change("status")).groupby(["tbname", "_wid"])], False),
    ("SELECT _wstart, _wend, _wduration, COUNT(*) FROM d11 SESSION(ts, 4s)",
     lambda m, w: [[g.ts.min(), g.ts.max(), g.ts.max() - g.ts.min(), len(g)] for _, g in
                   _event_windows(m[m.tbname == "d11"], [], _session_change(4000)).groupby("_wid")], True),
    ("SELECT tbname, COUNT(*) FROM meters PARTITION BY tbname SLIMIT 3 SOFFSET 2",
     lambda m, w: [[n, len(g)] for n, g in sorted(m.groupby("tbname"))[2:5]], False),
    ("SELECT location, COUNT(*) FROM meters GROUP BY location SLIMIT 2 SOFFSET 1",
     lambda m, w: _null_first([[k if isinstance(k, str) else None, len(g)]
                               for k, g in m.groupby("location", dropna=False)])[1:3], False),
    ("SELECT tbname, ts, voltage FROM meters WHERE tbname IN ('d20', 'd21') PARTITION BY tbname ORDER BY ts LIMIT 3",
     lambda m, w: [[n, r.ts, r.voltage] for n, g in m[m.tbname.isin(["d20", "d21"])].groupby("tbname")
                   for r in g.sort_values("ts").iloc[:3].itertuples()], False),
    ("SELECT tbname, AVG(current) AS a FROM meters GROUP BY tbname ORDER BY a DESC LIMIT 5",
     lambda m, w: sorted([[n, g.current.astype("float64").mean()] for n, g in m.groupby("tbname")],
                         key=lambda r: -r[1])[:5], True),
    ("SELECT tbname, COUNT(*) FROM meters WHERE voltage > 238 GROUP BY tbname HAVING COUNT(*) > 120",
     lambda m, w: [[n, len(g)] for n, g in m[m.voltage > 238].groupby("tbname") if len(g) > 120], False),
    ("SELECT DISTINCT location FROM meters",
     lambda m, w: [[v if isinstance(v, str) else None] for v in m.location.unique()], False),
    ("SELECT city, AVG(temp), MIN(hum) FROM weather GROUP BY city",
     lambda m, w: [[c, g.temp.mean(), int(g.hum.min())] for c, g in w.groupby("city")], False),
    ("SELECT COUNT(*) FROM weather WHERE ok = true AND temp > 25", lambda m, w: [[int((w.ok & (w.temp > 25)).sum())]],
     True),
    ("SELECT _wstart, MAX(hum), COUNT(*) FROM weather WHERE city = 'wuhan' INTERVAL(30m)",
     lambda m, w: _grouped((d := w[w.city == "wuhan"]).assign(_wstart=_align(d.ts, 1_800_000)), ["_wstart"],
                           h=("hum", "max"), n=("ts", "size")), True),
    ("SELECT COUNT(*) FROM weather WHERE ts < NOW AND ts > NOW - 36500d", lambda m, w: [[len(w)]], True),
    ("SELECT MAX(ts), MIN(ts), FIRST(temp) FROM w3",
     lambda m, w: [[(d := w[w.tbname == "w3"]).ts.max(), d.ts.min(), d.loc[d.ts.idxmin(), "temp"]]], True),
    ("SELECT ts, temp FROM weather WHERE tbname = 'w7' AND (hum < 5 OR hum > 95) ORDER BY ts DESC LIMIT 10",
     lambda m, w: w[(w.tbname == "w7") & ((w.hum < 5) | (w.hum > 95))].sort_values("ts", ascending=False)
     [["ts", "temp"]].iloc[:10], True),
    ("SELECT APERCENTILE(temp, 50) FROM weather", lambda m, w: [[w.temp.median()]], True),
]


def _null_first(rows: list[list[Any]]) -> list[list[Any]]:
    return sorted(rows, key=lambda r: (r[0] is not None, r[0] or ""))


def _close(a: Any, b: Any, approx: bool) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b)
    if isinstance(a, int) and isinstance(b, int):  # timestamps, counts, integer columns: exact
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        tol = 0.02 * max(abs(b), 1.0) if approx else 1e-6 * max(abs(b), 1.0)
        return abs(a - b) <= tol
    return bool(a == b)


def _norm(rows: list[list[Any]]) -> list[list[Any]]:
    return [[float(v) if isinstance(v, float) else v for v in r] for r in rows]


def _sort_key(row: list[Any]) -> tuple[Any, ...]:
    return tuple((v is None, "" if v is None else (round(v, 6) if isinstance(v, float) else v)) for v in row)


@pytest.mark.parametrize(("sql", "reference", "ordered"), CASES, ids=[c[0][:70] for c in CASES])
def test_select_equals_pandas(data: tuple[Broker, pd.DataFrame, pd.DataFrame], sql: str, reference: Reference,
                              ordered: bool) -> None:
    broker, m, w = data
    answer = _run(broker, sql)
    expected = reference(m, w)
    want = _rows(expected) if isinstance(expected, pd.DataFrame) else _rows(pd.DataFrame(expected)) \
        if expected and isinstance(expected[0], list) else []
    got = _norm(answer["data"])
    assert answer["rows"] == len(got)
    if not ordered:
        got, want = sorted(got, key=_sort_key), sorted(want, key=_sort_key)
    assert len(got) == len(want), (sql, got[:5], want[:5])
    approx = "APERCENTILE" in sql
    for g, e in zip(got, want, strict=True):
        assert len(g) == len(e) and all(_close(a, b, approx) for a, b in zip(g, e, strict=True)), (sql, g, e)


def test_there_are_enough_cases_and_rows(data: tuple[Broker, pd.DataFrame, pd.DataFrame]) -> None:
    _, m, w = data
    assert len(CASES) >= 40 and len(m) + len(w) >= 1_000_000


def test_fill_fills_the_windows_without_rows(data: tuple[Broker, pd.DataFrame, pd.DataFrame]) -> None:
    """The FILL cases have empty windows inside the data (the gaps) and after it."""
    broker, _, _ = data
    base = ("SELECT _wstart, AVG(voltage) FROM d46 WHERE ts >= '2024-01-01 00:00:00' AND ts < '2024-01-01 06:00:00' "
            "INTERVAL(13m)")
    plain = {r[0]: r[1] for r in _run(broker, base)["data"]}
    filled = {mode: {r[0]: r[1] for r in _run(broker, f"{base} FILL({mode})")["data"]}
              for mode in ("NULL", "PREV", "NEXT", "LINEAR")}
    empty = sorted(set(filled["NULL"]) - set(plain))
    inside = [t for t in empty if min(plain) < t < max(plain)]
    assert len(inside) >= 2 and len(empty) > len(inside)
    assert all(filled["NULL"][t] is None for t in empty)
    for t in inside:
        before = max(p for p in plain if p < t)
        after = min(p for p in plain if p > t)
        assert filled["PREV"][t] == plain[before] and filled["NEXT"][t] == plain[after]
        share = (t - before) / (after - before)
        assert filled["LINEAR"][t] == pytest.approx(plain[before] + (plain[after] - plain[before]) * share)


def test_column_meta_has_tdengine_types_and_names_as_written(data: tuple[Broker, pd.DataFrame, pd.DataFrame]) -> None:
    broker, _, _ = data
    answer = _run(broker, "SELECT _wstart, count(*), avg(current), sum(voltage), max(current) AS mx, spread(status), "
                          "tbname, location FROM meters WHERE tbname = 'd1' PARTITION BY tbname, location INTERVAL(1h)")
    assert answer["column_meta"] == [["_wstart", "TIMESTAMP", 8], ["count(*)", "BIGINT", 8],
                                     ["avg(current)", "DOUBLE", 8], ["sum(voltage)", "BIGINT", 8],
                                     ["mx", "FLOAT", 4], ["spread(status)", "DOUBLE", 8], ["tbname", "VARCHAR", 192],
                                     ["location", "VARCHAR", 32]]
    star = _run(broker, "SELECT * FROM weather LIMIT 1")
    assert [c[:2] for c in star["column_meta"]] == [["ts", "TIMESTAMP"], ["temp", "DOUBLE"], ["hum", "SMALLINT"],
                                                    ["ok", "BOOL"], ["city", "NCHAR"]]


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT nope FROM meters", "invalid column name nope at position 7"),
    ("SELECT * FROM nowhere", "Table does not exist: nowhere"),
    ("SELECT count(*) FROM meters FILL(NULL)", "FILL needs INTERVAL"),
    ("SELECT ts FROM meters INTERVAL(1m)", "a window clause needs an aggregate function"),
    ("SELECT count(*) FROM meters INTERVAL(1m) SLIDING(2m)", "sliding value no larger than the interval value"),
    ("SELECT _wstart FROM meters", "_wstart is only allowed with a window clause at position 7"),
    ("SELECT twa(current) FROM meters", "function TWA is not supported at position 7"),
    ("SELECT count(*) FROM meters INTERVAL(1n)", "unsupported duration unit 'n'"),
    ("SELECT count(*) FROM meters WHERE ts > '2024-13-01'", "invalid timestamp '2024-13-01'"),
])
def test_bad_queries_are_refused_with_the_reason(data: tuple[Broker, pd.DataFrame, pd.DataFrame], sql: str,
                                                 message: str) -> None:
    broker, _, _ = data
    with pytest.raises(SqlError) as refused:
        _run(broker, sql)
    assert message in refused.value.message


def test_a_time_range_prunes_what_is_read(data: tuple[Broker, pd.DataFrame, pd.DataFrame]) -> None:
    """Entries outside the WHERE's time range are never read: the bytes read shrink, the
    answer does not change."""
    from tmqgate.broker.sql import select as select_mod
    from tmqgate.broker.sql.parser import parse

    broker, m, _ = data

    def read_bytes(sql: str) -> int:
        stmt = parse(sql)
        info, _, plan, vnodes = select_mod._prepare(broker.executor, stmt, "t29")  # type: ignore[arg-type]
        return sum(len(b) for chunk in select_mod._read(broker.executor, info, vnodes, plan, SelectLimits())
                   for b in chunk)

    everything = read_bytes("SELECT count(*) FROM meters")
    window = read_bytes(f"SELECT count(*) FROM meters WHERE ts >= {LO} AND ts < {LO + 600_000}")
    assert window < everything / 2
    assert _run(broker, f"SELECT count(*) FROM meters WHERE ts >= {LO} AND ts < {LO + 600_000}")["data"] == [
        [len(_in(m, LO, LO + 600_000))]]


@pytest.mark.parametrize(("limits", "sql", "message"), [
    (SelectLimits(max_bytes=1 << 20), "SELECT count(*) FROM meters",
     "the query would read more than 1048576 bytes of rows (sql_select_max_bytes)"),
    (SelectLimits(memory_bytes=16 << 20), "SELECT tbname, ts, count(*) FROM meters GROUP BY tbname, ts",
     "the query needs more memory than 16777216 bytes (sql_select_memory_bytes)"),
    (SelectLimits(timeout_s=0.2), "SELECT _wstart, count(*) FROM meters INTERVAL(10m) SLIDING(1a)",
     "the query ran longer than 0.2 s (sql_select_timeout_ms)"),
])
def test_a_query_past_its_bounds_is_refused_and_the_next_runs(
        data: tuple[Broker, pd.DataFrame, pd.DataFrame], monkeypatch: pytest.MonkeyPatch, limits: SelectLimits,
        sql: str, message: str) -> None:
    broker, m, _ = data
    monkeypatch.setattr(broker.executor, "select_limits", limits)
    with pytest.raises(SqlError) as refused:
        _run(broker, sql)
    assert message in refused.value.message
    monkeypatch.undo()
    assert _run(broker, "SELECT count(*) FROM meters")["data"] == [[len(m)]]


def test_an_answer_has_at_most_max_result_rows(data: tuple[Broker, pd.DataFrame, pd.DataFrame],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from tmqgate.broker.sql import select as select_mod

    broker, _, _ = data
    monkeypatch.setattr(select_mod, "MAX_RESULT_ROWS", 1000)
    assert _run(broker, "SELECT ts FROM d1 LIMIT 1000")["rows"] == 1000
    with pytest.raises(SqlError, match="the result has more than 1000 rows: add LIMIT"):
        _run(broker, "SELECT ts FROM d1")


def test_the_event_loop_serves_others_while_a_select_runs(data: tuple[Broker, pd.DataFrame, pd.DataFrame]) -> None:
    """The WAL is read in chunks with the loop served between them, and the engine runs in
    the query pool: a coroutine ticking on the loop keeps ticking through a whole-table query."""
    broker, m, _ = data

    async def go() -> tuple[int, int, dict[str, Any]]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        answer = (await broker.executor.execute_async(
            "SELECT tbname, _wstart, avg(current) FROM meters PARTITION BY tbname INTERVAL(1m)", "t29")).to_json()
        at_answer = ticks
        done.set()
        await task
        return at_answer, len(m), answer

    ticks, rows, answer = asyncio.run(go())
    # at least one tick per chunk read and many while the engine ran (a held loop: none)
    assert ticks > 100 and answer["rows"] > 0


def test_queries_at_once_each_see_their_own_rows(data: tuple[Broker, pd.DataFrame, pd.DataFrame]) -> None:
    """Queries running at once in the pool share one DuckDB, each on a connection of its own."""
    broker, m, w = data

    async def go() -> list[Any]:
        texts = ["SELECT count(*) FROM meters", "SELECT count(*) FROM weather", "SELECT count(*) FROM d3",
                 "SELECT count(*) FROM w3"] * 3
        answers = await asyncio.gather(*(broker.executor.execute_async(t, "t29") for t in texts))
        return [a.rows[0][0] for a in answers]

    assert asyncio.run(go()) == [len(m), len(w), int((m.tbname == "d3").sum()), int((w.tbname == "w3").sum())] * 3


def test_a_child_tables_rows_on_several_vnodes_are_all_read(tmp_path: Path) -> None:
    """A Kafka producer picks the partition, so one child table's rows can lie on several
    vnodes: a query naming it reads them all."""
    broker = Broker(BrokerConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / "data")))
    try:
        ex = broker.executor
        ex.execute("CREATE DATABASE v2 VGROUPS 2; CREATE STABLE v2.st (ts TIMESTAMP, v INT) TAGS (g INT); "
                   "CREATE TABLE v2.c1 USING v2.st TAGS (1)")
        schema = broker.catalog.schema("v2", "st")
        assert schema is not None
        for vnode in (0, 1):  # as schemaless writes do, on the partition the record came in
            table = build_rows_table(schema, pa.array(["c1", "c1"]),
                                     {"ts": pa.array([vnode * 10, vnode * 10 + 1], pa.int64()),
                                      "v": pa.array([vnode, vnode], pa.int32())})
            ex.append_rows_many("v2", vnode, [("st", table)])
        for sql in ("SELECT count(*), sum(v) FROM v2.st WHERE tbname = 'c1'", "SELECT count(*), sum(v) FROM v2.c1"):
            assert asyncio.run(ex.execute_async(sql)).rows == [[4, 2]], sql
    finally:
        broker.executor.close()
        broker.store.close()
