CREATE DATABASE IF NOT EXISTS power VGROUPS 2;
CREATE STABLE IF NOT EXISTS power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT) TAGS (location VARCHAR(64), groupid INT);
INSERT INTO power.d1001 USING power.meters TAGS ('California.SanFrancisco', 2) VALUES (now, 10.3, 221, 0.31);
INSERT INTO power.d1002 USING power.meters TAGS ('California.SanJose', 3) VALUES (now, 12.6, 230, 0.33);
CREATE TOPIC IF NOT EXISTS hot AS SELECT ts, current, voltage, location FROM power.meters WHERE voltage > 220
