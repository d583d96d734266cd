#!/usr/bin/env node
// node-postgres (`pg`) through pgcorral: many clients over a transaction-mode pool of a few
// servers, running named queries ({name, text, values}).
//
// node-postgres sends Parse for a name only the first time a connection uses it (Parse, Bind,
// Describe portal, Execute, Sync, in one write); after that only Bind, Describe, Execute, Sync,
// in later transactions, which the pooler runs on whatever server is free. Every client uses
// the same names, some with a text of its own (the same name, different texts on different
// connections). Also: a query read in pages of 3 rows (Execute with a row limit and Flush until
// the portal is done, then Sync), explicit transactions that commit and roll back, unnamed
// queries with parameters, and, on a quarter of the clients, pipeline mode (`pipeline: true`:
// queries are written without waiting for the previous ReadyForQuery, so several Syncs are in
// flight at once). Every result is checked.
//
//     node pg_named.js [--host H] [--port P] [--user U] [--database D] [--clients N] [--rounds R]
//
// Defaults come from PGHOST, PGPORT, PGUSER and PGDATABASE. Prints one line, `node-postgres ok:
// ...`, and exits 0; or prints the errors and exits 1.
'use strict'

let pg
try {
  pg = require('pg')
} catch (e) {
  console.error('node-postgres is not installed: cd crates/pgcorral/tests/drivers && npm install')
  process.exit(3)
}

function parseArgs() {
  const a = {
    host: process.env.PGHOST || '127.0.0.1',
    port: Number(process.env.PGPORT || 6432),
    user: process.env.PGUSER || 'postgres',
    database: process.env.PGDATABASE || 'postgres',
    clients: 40,
    rounds: 30,
    timeout: 120,
  }
  const argv = process.argv.slice(2)
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '')
    if (!(key in a) || i + 1 >= argv.length) {
      console.error(`usage: pg_named.js [--host H] [--port P] [--user U] [--database D] [--clients N] [--rounds R] [--timeout S]`)
      process.exit(2)
    }
    a[key] = typeof a[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1]
  }
  return a
}

const ITEMS = 10

class Mismatch extends Error {}

function check(what, got, want) {
  const g = JSON.stringify(got)
  const w = JSON.stringify(want)
  if (g !== w) throw new Mismatch(`${what}: got ${g}, want ${w}`)
}

// [name, config for client c in round r, expected rows]
const QUERIES = [
  [
    'calc',
    (c, r) => ({ name: 'calc', text: `SELECT $1::int * ${c + 1} + $2::int AS v`, values: [r, c] }),
    (c, r) => [{ v: r * (c + 1) + c }],
  ],
  [
    'echo',
    (c, r) => ({ name: 'echo', text: 'SELECT $1::text AS s, $2::int8 AS n', values: [`c${c}`, r] }),
    (c, r) => [{ s: `c${c}`, n: String(r) }],
  ],
  [
    'series',
    (c, r) => ({
      name: 'series',
      text: 'SELECT g, g * $2::int AS m FROM generate_series(1, $1::int) AS g',
      values: [(r % 7) + 1, c],
    }),
    (c, r) => Array.from({ length: (r % 7) + 1 }, (_, i) => ({ g: i + 1, m: (i + 1) * c })),
  ],
  [
    'item',
    (c, r) => ({ name: 'item', text: 'SELECT v FROM node_items WHERE client = $1 AND i = $2', values: [c, r % ITEMS] }),
    (c, r) => [{ v: `item ${c}/${r % ITEMS}` }],
  ],
  [
    'mine',
    (c, r) => ({ name: 'mine', text: `SELECT ${c}::int AS c, $1::text AS t`, values: [`r${r}`] }),
    (c, r) => [{ c, t: `r${r}` }],
  ],
  [
    'paged',
    (c, r) => ({ name: 'paged', text: 'SELECT g FROM generate_series(1, $1::int) AS g', values: [10 + (r % 5)], rows: 3 }),
    (c, r) => Array.from({ length: 10 + (r % 5) }, (_, i) => ({ g: i + 1 })),
  ],
]

async function runClient(a, c, stats) {
  // node-postgres refuses `rows` (a portal kept open across round trips) in pipeline mode.
  const pipelined = c % 4 === 3
  const client = new pg.Client({
    host: a.host,
    port: a.port,
    user: a.user,
    database: a.database,
    connectionTimeoutMillis: 30000,
    pipeline: pipelined,
  })
  let where = 'connect'
  const pids = new Set()
  let counter = 0
  let queries = 0
  await client.connect()
  try {
    const shift = c % QUERIES.length
    const order = QUERIES.slice(shift)
      .concat(QUERIES.slice(0, shift))
      .filter(([name]) => !(pipelined && name === 'paged'))
    const pid = async () => {
      const res = await client.query({ name: 'pid', text: 'SELECT pg_backend_pid() AS pid' })
      pids.add(res.rows[0].pid)
      queries++
    }
    const bump = () =>
      client.query({ name: 'bump', text: 'UPDATE node_counters SET n = n + 1 WHERE client = $1 RETURNING n', values: [c] })
    const count = async () =>
      (await client.query({ name: 'count', text: 'SELECT n FROM node_counters WHERE client = $1', values: [c] })).rows[0].n
    for (let r = 0; r < a.rounds; r++) {
      for (const [name, config, want] of order) {
        where = `round ${r} ${name}`
        const res = await client.query(config(c, r))
        check(where, res.rows, want(c, r))
        queries++
      }
      where = `round ${r} pid`
      await pid()

      where = `round ${r} unnamed`
      check(where, (await client.query('SELECT $1::int + 1 AS v', [r])).rows, [{ v: r + 1 }])
      queries++

      if (pipelined) {
        // Written at once, each with its own Sync, the next before the previous one's answer.
        where = `round ${r} pipelined`
        const sent = [0, 1, 2, 3, 4].map((k) => client.query(QUERIES[k][1](c, r + k)))
        sent.push(client.query({ name: 'pid', text: 'SELECT pg_backend_pid() AS pid' }))
        const got = await Promise.all(sent)
        got.slice(0, 5).forEach((res, k) => check(`${where} ${k}`, res.rows, QUERIES[k][2](c, r + k)))
        pids.add(got[5].rows[0].pid)
        queries += 6
      }

      if (r % 3 === 0) {
        where = `round ${r} transaction`
        await client.query('BEGIN')
        check(where + ' update', (await bump()).rows, [{ n: counter + 1 }])
        check(where + ' read back', await count(), counter + 1)
        await pid()
        await client.query('COMMIT')
        counter++
        queries += 4
      } else if (r % 3 === 1) {
        where = `round ${r} rollback`
        await client.query('BEGIN')
        check(where + ' update', (await bump()).rows, [{ n: counter + 1 }])
        await client.query('ROLLBACK')
        check(where + ' after', await count(), counter)
        queries += 4
      }
    }
    where = 'end'
    check('final counter', await count(), counter)
  } catch (e) {
    const first = String(e.message || e).split('\n')[0]
    throw new Error(`client ${c}, ${where}: ${e.constructor.name}${e.code ? ' ' + e.code : ''}: ${first}`)
  } finally {
    await client.end().catch(() => {})
  }
  stats.queries += queries
  for (const p of pids) stats.pids.add(p)
  if (pids.size > 1) stats.moved++
}

async function main() {
  const a = parseArgs()
  const timer = setTimeout(() => {
    console.error(`node-postgres FAILED: not done after ${a.timeout} s`)
    process.exit(1)
  }, a.timeout * 1000)
  timer.unref()

  const setup = new pg.Client({ host: a.host, port: a.port, user: a.user, database: a.database })
  await setup.connect()
  try {
    // Several statements in one string: the simple protocol.
    await setup.query(`
      DROP TABLE IF EXISTS node_items, node_counters;
      CREATE TABLE node_items (client int, i int, v text NOT NULL, PRIMARY KEY (client, i));
      INSERT INTO node_items
        SELECT c, i, format('item %s/%s', c, i) FROM generate_series(0, ${a.clients - 1}) c, generate_series(0, ${ITEMS - 1}) i;
      CREATE TABLE node_counters (client int PRIMARY KEY, n int NOT NULL);
      INSERT INTO node_counters SELECT c, 0 FROM generate_series(0, ${a.clients - 1}) c;
    `)
  } finally {
    await setup.end()
  }

  const stats = { queries: 0, pids: new Set(), moved: 0 }
  const results = await Promise.allSettled(Array.from({ length: a.clients }, (_, c) => runClient(a, c, stats)))
  const errors = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason.message || r.reason))
  if (errors.length > 0) {
    console.error(`node-postgres FAILED: ${errors.length} of ${a.clients} clients failed`)
    for (const e of errors.slice(0, 10)) console.error(`  ${e}`)
    process.exit(1)
  }
  console.log(
    `node-postgres ok: ${a.clients} clients, ${a.rounds} rounds, ${stats.queries} queries checked, ` +
      `${stats.pids.size} server backends seen, ${stats.moved}/${a.clients} clients on more than one`
  )
}

main().catch((e) => {
  console.error(`node-postgres FAILED: ${e.stack || e}`)
  process.exit(1)
})
