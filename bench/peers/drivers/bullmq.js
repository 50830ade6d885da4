// BullMQ's side (NODE_PATH = the peers directory's node_modules):
//   node bullmq.js enqueue N KIND      Queue.addBulk, 1000 at a time (jobs keep BullMQ's defaults:
//                                      completed jobs are kept, which getJobCounts counts)
//   node bullmq.js work                a Worker with PEERS_CONCURRENCY; SIGTERM closes it gracefully
//   node bullmq.js counts              Queue.getJobCounts() as JSON
// KIND noop returns at once; io_async makes one request to the bench's 5 ms server (PEERS_IO_PORT).
'use strict';
const net = require('net');
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const url = process.env.PEERS_REDIS_URL;
const name = process.env.PEERS_QUEUE;

function ioAsync() {
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(process.env.PEERS_IO_PORT), '127.0.0.1');
    let buf = '';
    s.on('connect', () => s.write('x\n'));
    s.on('data', (d) => { buf += d; if (buf.endsWith('\n')) { s.end(); resolve(); } });
    s.on('error', reject);
  });
}

async function main() {
  const [cmd, n, kind] = process.argv.slice(2);
  if (cmd === 'enqueue') {
    const queue = new Queue(name, { connection: new IORedis(url) });
    for (let start = 0; start < Number(n); start += 1000) {
      const count = Math.min(1000, Number(n) - start);
      await queue.addBulk(Array.from({ length: count }, () => ({ name: kind, data: {} })));
    }
    await queue.close();
    process.exit(0);
  } else if (cmd === 'counts') {
    const queue = new Queue(name, { connection: new IORedis(url) });
    console.log(JSON.stringify(await queue.getJobCounts()));
    await queue.close();
    process.exit(0);
  } else if (cmd === 'work') {
    const worker = new Worker(name, async (job) => {
      if (job.name === 'io_async') await ioAsync();
    }, { connection: new IORedis(url, { maxRetriesPerRequest: null }),
         concurrency: Number(process.env.PEERS_CONCURRENCY || 1) });
    worker.on('failed', (job, err) => console.error('failed', job && job.id, err && err.message));
    const stop = async () => { await worker.close(); process.exit(0); };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
