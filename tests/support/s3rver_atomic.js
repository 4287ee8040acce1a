#!/usr/bin/env node
'use strict';
/*
 * s3rver_atomic.js - run s3rver (node_modules/s3rver, same arguments as
 * its bin/s3rver.js) with its filesystem store giving S3's read-after-write
 * guarantee: a PUT is atomic and complete before it is answered.
 *
 * s3rver 3.7.1 answers a PUT before the object's bytes are on disk (a
 * Buffer body resolves at writeStream.end(), a streamed one at the end of
 * the MD5 transform, before the file stream finishes), and it rewrites the
 * object's file in place. A GET that follows the PUT's answer at once, or
 * that overlaps another PUT of the same key, then reads a short or empty
 * object - which S3 never serves. Tests that read back what they just
 * wrote (the lease's create-then-read) failed at random under load.
 *
 * Here each object's bytes go to a temporary file first and are renamed
 * into place once the file is closed; and the store's operations on one
 * key (get, head, put, delete, copy to it) run one after another, so a
 * reader sees an object's size, MD5 and bytes from one version. Readers
 * that already opened the file keep the old version (rename, not
 * truncate), as a GET in flight on S3 does.
 */
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { AsyncLocalStorage } = require('async_hooks');
const { Transform } = require('stream');

const Store = require('s3rver/lib/stores/filesystem');

const queues = new Map();   // "bucket/key" -> tail of its operation chain
const held = new AsyncLocalStorage();

/* Run fn after every earlier operation on key; an operation nested in one
 * already holding key (getObject -> getMetadata) runs at once. */
function serial(key, fn) {
  const mine = held.getStore();
  if (mine && mine.has(key)) return fn();
  const prev = queues.get(key) || Promise.resolve();
  const keys = new Set(mine || []).add(key);
  const run = prev.then(() => held.run(keys, fn));
  const tail = run.then(() => {}, () => {});
  queues.set(key, tail);
  tail.then(() => {
    if (queues.get(key) === tail) queues.delete(key);
  });
  return run;
}

let seq = 0;

/* The object's bytes into a temporary file beside it, then renamed: no
 * reader ever opens a partly written object. */
Store.prototype.putObject = async function putObject(object) {
  const objectPath = this.getResourcePath(object.bucket, object.key,
                                          'object');
  await fs.promises.mkdir(path.dirname(objectPath), { recursive: true });
  const tmp = `${objectPath}.atomic-${process.pid}-${++seq}`;
  const md5 = crypto.createHash('md5');
  let size = 0;
  try {
    await new Promise((resolve, reject) => {
      const out = fs.createWriteStream(tmp);
      out.on('error', reject).on('close', resolve);
      if (Buffer.isBuffer(object.content)) {
        md5.update(object.content);
        size = object.content.length;
        out.end(object.content);
        return;
      }
      object.content
        .on('error', reject)
        .pipe(new Transform({
          transform(chunk, encoding, callback) {
            md5.update(chunk, encoding);
            size += chunk.length;
            callback(null, chunk);
          },
        }))
        .on('error', reject)
        .pipe(out);
    });
    const hex = md5.digest('hex');
    return await serial(`${object.bucket}/${object.key}`, async () => {
      await fs.promises.rename(tmp, objectPath);
      await this.putMetadata(object.bucket, object.key, object.metadata,
                             hex);
      return { size, md5: hex };
    });
  } finally {
    await fs.promises.rm(tmp, { force: true });
  }
};

function keyed(name, keyOf) {
  const orig = Store.prototype[name];
  Store.prototype[name] = function (...args) {
    return serial(keyOf(...args), () => orig.apply(this, args));
  };
}

keyed('getMetadata', (bucket, key) => `${bucket}/${key}`);
keyed('getObject', (bucket, key) => `${bucket}/${key}`);
keyed('existsObject', (bucket, key) => `${bucket}/${key}`);
keyed('deleteObject', (bucket, key) => `${bucket}/${key}`);
keyed('copyObject', (sb, sk, db, dk) => `${db}/${dk}`);

/* A listing with a delimiter reports each common prefix as S3 does.
 * s3rver's walk skips every directory two levels below the prefix, so a
 * prefix holding only deeper objects (x/wandb/a/f under x/) was reported
 * neither as a key nor as a common prefix: x/ looked empty. Here the
 * listing is taken without the delimiter and folded: each key whose
 * remainder holds the delimiter becomes its prefix, max-keys counts the
 * keys (as s3rver does), and a truncated page reports only the prefixes
 * before its last key (the continuation token is that key). */
const listAll = Store.prototype.listObjects;
Store.prototype.listObjects = async function listObjects(bucket, options) {
  const { delimiter = '', prefix = '', maxKeys = Infinity } = options;
  if (!delimiter) return listAll.call(this, bucket, options);
  const all = await listAll.call(this, bucket,
                                 { ...options, delimiter: '',
                                   maxKeys: Infinity });
  all.objects.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const start = options.startAfter || '';
  const prefixes = new Set();
  const objects = [];
  let isTruncated = false;
  for (const o of all.objects) {
    const idx = o.key.slice(prefix.length).indexOf(delimiter);
    if (idx !== -1) {
      const cp = o.key.slice(0, prefix.length + idx + 1);
      if (!(start && start.startsWith(cp))) prefixes.add(cp);
      continue;
    }
    if (objects.length >= maxKeys) {
      isTruncated = true;
      break;
    }
    objects.push(o);
  }
  let commonPrefixes = [...prefixes].sort();
  if (isTruncated) {
    const last = objects[objects.length - 1].key;
    commonPrefixes = commonPrefixes.filter(cp => cp < last);
  }
  return { objects, commonPrefixes, isTruncated };
};

process.argv.splice(1, 1, require.resolve('s3rver/bin/s3rver.js'));
require('s3rver/bin/s3rver.js');
