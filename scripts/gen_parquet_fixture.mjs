// Generates data/testdata/parquet: JSONL files and the same rows as
// Parquet written by DuckDB, another Parquet implementation than the Go
// reader's, so that data's tests prove the interchange (each .parquet
// gives exactly the rows and tokens of its .jsonl), plus malformed files
// for the errors. Message lists are lists of structs with the fields in
// the order Hugging Face datasets store them ({content, role}).
//
// Run from the repository root (Node 18 or later, npm registry access):
//
//   mkdir -p /tmp/duckdb && (cd /tmp/duckdb && npm init -y && npm install @duckdb/node-api@1.5.6-r.1)
//   NODE_PATH=/tmp/duckdb/node_modules node scripts/gen_parquet_fixture.mjs
//
// (or any @duckdb/node-api; the output is deterministic for one DuckDB
// version). go test never runs this: the files it writes are committed.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), 'x.js'));
const { DuckDBInstance } = require('@duckdb/node-api');

const dir = 'data/testdata/parquet';
fs.mkdirSync(dir, { recursive: true });
const db = await DuckDBInstance.create(':memory:');
const c = await db.connect();
await c.run('SET threads = 1'); // one writer: rows in order, one layout

const msgs = (...turns) => turns.map(([role, content]) => ({ role, content }));

// Each kind of row: its JSONL rows and the DuckDB types of its columns.
const kinds = {
  text: {
    columns: { text: 'VARCHAR' },
    rows: [
      { text: 'Hello, world.' },
      { text: 'Line one\nline two\ttabbed "quoted" \\ back' },
      { text: 'Unicode: naïve café, 日本語, emoji 🎉, <html> & more' },
      { text: 'x' },
    ],
  },
  prompt_completion: {
    columns: { prompt: 'VARCHAR', completion: 'VARCHAR' },
    rows: [
      { prompt: 'Date: 2021-03-07\nIn words:', completion: ' March 7, 2021' },
      { prompt: '', completion: 'an empty prompt is allowed' },
      { prompt: 'Ünïcödé → ', completion: '✓ 🎉' },
    ],
  },
  input_ids: {
    columns: { input_ids: 'INTEGER[]' },
    rows: [{ input_ids: [256, 72, 105, 257] }, { input_ids: [1, 2] }, { input_ids: [0, 255, 100, 258, 3] }],
  },
  messages: {
    columns: { messages: 'STRUCT(content VARCHAR, role VARCHAR)[]' },
    rows: [
      { messages: msgs(['user', 'Hi'], ['assistant', 'Hello!']) },
      { messages: msgs(['system', 'Be brief.'], ['user', 'Date: 2021-03-07?'], ['assistant', 'March 7, 2021.'], ['user', 'And 1999-12-31?'], ['assistant', 'December 31, 1999.']) },
      { messages: msgs(['user', 'Ça va ? 🎉'], ['assistant', 'Oui, très bien.\nEt toi ?']) },
    ],
  },
  conversations: {
    columns: { conversations: 'STRUCT("from" VARCHAR, value VARCHAR)[]' },
    rows: [
      { conversations: [{ from: 'human', value: 'Hi' }, { from: 'gpt', value: 'Hello!' }] },
      { conversations: [{ from: 'system', value: 'Terse.' }, { from: 'human', value: 'Two?' }, { from: 'gpt', value: '2' }] },
    ],
  },
  alpaca: {
    columns: { instruction: 'VARCHAR', input: 'VARCHAR', output: 'VARCHAR' },
    rows: [
      { instruction: 'Add the numbers.', input: '2 and 3', output: '5' },
      { instruction: 'Say hello.', output: 'Hello.' }, // a null input in Parquet
    ],
  },
  pairs: {
    columns: { prompt: 'VARCHAR', chosen: 'VARCHAR', rejected: 'VARCHAR' },
    extra: 'id', // a column other than the row's, not read
    rows: [
      { prompt: 'Date: 1952-03-25\nIn words:', chosen: ' March 25, 1952', rejected: ' March 25, 1925' },
      { prompt: 'Date: 1974-02-12\nIn words:', chosen: ' February 12, 1974', rejected: ' December 2, 1974' },
      { prompt: '', chosen: 'yes ✓', rejected: 'no ✗' },
    ],
  },
  pairs_chat: {
    columns: {
      prompt: 'STRUCT(content VARCHAR, role VARCHAR)[]',
      chosen: 'STRUCT(content VARCHAR, role VARCHAR)[]',
      rejected: 'STRUCT(content VARCHAR, role VARCHAR)[]',
    },
    rows: [
      { prompt: msgs(['user', 'Date: 1952-03-25?']), chosen: msgs(['assistant', 'March 25, 1952']), rejected: msgs(['assistant', 'March 25, 1925']) },
      { prompt: msgs(['system', 'Be brief.'], ['user', 'Capital of France?']), chosen: msgs(['assistant', 'Paris.']), rejected: msgs(['assistant', 'Lyon.']) },
    ],
  },
};

const q = (s) => `'${s.replace(/'/g, "''")}'`;
const duck = (cols) => `{${Object.entries(cols).map(([k, v]) => `${q(k)}: ${q(v)}`).join(', ')}}`;

for (const [name, k] of Object.entries(kinds)) {
  const jsonl = path.join(dir, `${name}.jsonl`);
  fs.writeFileSync(jsonl, k.rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const sel = k.extra ? `SELECT row_number() OVER () AS ${k.extra}, *` : 'SELECT *';
  await c.run(`COPY (${sel} FROM read_json(${q(jsonl)}, columns = ${duck(k.columns)})) TO ${q(path.join(dir, `${name}.parquet`))} (FORMAT parquet)`);
}

// Several row groups: the dates task's 4000 training rows, 2048 a group
// (DuckDB's smallest), zstd-compressed.
await c.run(`COPY (SELECT * FROM read_json('tasks/dates/train.jsonl', columns = {'prompt': 'VARCHAR', 'completion': 'VARCHAR'}))
  TO ${q(path.join(dir, 'dates_train.parquet'))} (FORMAT parquet, ROW_GROUP_SIZE 2048, COMPRESSION zstd)`);

// Malformed files, each with the error it must give.
const bad = {
  bad_null_completion: `SELECT * FROM (VALUES ('a', 'b'), ('c', NULL), ('e', 'f')) t(prompt, completion)`,
  bad_int_text: `SELECT 42 AS text`,
  bad_pairs_missing_rejected: `SELECT 'p' AS prompt, 'c' AS chosen`,
  bad_null_content: `SELECT [{'content': 'Hi', 'role': 'user'}, {'content': NULL, 'role': 'assistant'}] AS messages`,
  bad_messages_strings: `SELECT ['Hi', 'Hello'] AS messages`,
  bad_two_kinds: `SELECT 'a' AS text, [{'content': 'Hi', 'role': 'user'}] AS messages`,
  bad_empty_messages: `SELECT []::STRUCT(content VARCHAR, role VARCHAR)[] AS messages`,
  bad_null_messages: `SELECT * FROM (VALUES ([{'content': 'Hi', 'role': 'user'}, {'content': 'Hello', 'role': 'assistant'}]), (NULL)) t(messages)`,
};
for (const [name, sql] of Object.entries(bad)) {
  await c.run(`COPY (${sql}) TO ${q(path.join(dir, `${name}.parquet`))} (FORMAT parquet)`);
}
console.log('wrote', dir);
