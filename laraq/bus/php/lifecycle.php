<?php
// laraq's in-process PHP half of a job (laraq/bus/phpprocess.py starts it, one per worker process).
// Requests and replies travel on two pipes of their own, the file descriptors REQUEST_FD and REPLY_FD
// (php://fd/N), never the app's stdin, stdout or stderr: only this script writes to REPLY_FD. Each
// frame is one JSON object on one line (json_encode escapes newlines) with an "id". After booting the
// app it writes {"id": 0, "ready": true, "laravel": VERSION}; then for each request line
//   {"id": N, "op": "success", "body": BASE64 OF THE RAW BODY, "connection": C, "queue": Q, "steps": ["unique-now"|"unique"|"chain"|"batch"]}
//   {"id": N, "op": "failed",  "body": BASE64 OF THE RAW BODY, "connection": C, "queue": Q, "uuid": U, "class": E, "message": M}
//   {"id": N, "op": "classes", "classes": [CLASS, ...]}
//   {"id": N, "op": "ping"}
// it writes one reply line {"id": N, "ok": true} or {"id": N, "ok": false, "error": TEXT} (id null when
// the request cannot be read: the worker takes that as a protocol error). "classes" replies with
// "classes": {CLASS: {"exists": bool, "unique": "until_processing"|"unique"|null, "runs_in_python": bool}}
// (the ShouldBeUnique interfaces it implements, and whether it uses a trait named RunsInPython,
// class_uses_recursive as Laravel reads traits).
// Each step is the app's own Illuminate\Queue\CallQueuedHandler method, called on the command PHP
// unserializes from the original payload: ensureUniqueJobLockIsReleased, ensureNextJobInChainIsDispatched,
// ensureSuccessfulBatchJobIsRecorded, and failed() (unique lock, batch recordFailedJob, chain catch
// callbacks, the command's failed()). handle() is never called. What the app prints to its output buffer
// during a step is sent to stderr; its stdout is the worker's stderr (the worker starts it so).
// Usage: php lifecycle.php BASE_PATH REQUEST_FD REPLY_FD

$base = rtrim($argv[1] ?? getcwd(), '/');
$laraqPipes = [(int) ($argv[2] ?? -1), (int) ($argv[3] ?? -1)];
foreach (['/bootstrap/autoload.php', '/vendor/autoload.php'] as $loader) {
    if (is_file($base.$loader)) {
        require $base.$loader;
        break;
    }
}
$app = require $base.'/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();

$in = $laraqPipes[0] >= 0 ? fopen('php://fd/'.$laraqPipes[0], 'rb') : false;
$out = $laraqPipes[1] >= 0 ? fopen('php://fd/'.$laraqPipes[1], 'wb') : false;
if ($in === false || $out === false) {
    fwrite(STDERR, "usage: php lifecycle.php BASE_PATH REQUEST_FD REPLY_FD (the two pipes could not be opened)\n");
    exit(2);
}
$err = fopen('php://stderr', 'w');

function laraq_reply($out, array $reply): void
{
    $line = json_encode($reply, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE);
    if ($line === false) {
        $line = json_encode(['id' => $reply['id'] ?? null, 'ok' => false, 'error' => 'the reply cannot be encoded: '.json_last_error_msg()]);
    }
    fwrite($out, $line."\n");
    fflush($out);
}

function laraq_job(array $req): Illuminate\Queue\Jobs\RedisJob
{
    $connection = (string) $req['connection'];
    return new Illuminate\Queue\Jobs\RedisJob(app(), app('queue')->connection($connection), $req['raw'],
        $req['raw'], $connection, (string) $req['queue']);
}

function laraq_run(array $req): void
{
    $handler = app(Illuminate\Queue\CallQueuedHandler::class);
    $req['raw'] = base64_decode((string) $req['body'], true);
    $job = laraq_job($req);
    $payload = json_decode($req['raw'], true);
    // only a queued job object's data.command is a command, as in Illuminate\Queue\Jobs\Job::fire: a
    // string job's data is the array the app pushed and is never unserialized
    $name = is_array($payload) && is_string($payload['job'] ?? null) ? ltrim(trim($payload['job']), '\\') : '';
    if ($name !== 'Illuminate\\Queue\\CallQueuedHandler@call') {
        throw new InvalidArgumentException('not a queued command (job '.json_encode(substr($name, 0, 200)).'): its data is not unserialized');
    }
    $data = is_array($payload['data'] ?? null) ? $payload['data'] : [];
    if ($req['op'] === 'failed') {
        // a class the app does not have (a job only Python knows): PHP has no failure steps for it
        $command = (function () use ($data) {
            return $this->getCommand($data);
        })->call($handler);
        if ($command instanceof __PHP_Incomplete_Class) {
            return;
        }
        $class = (string) ($req['class'] ?? '');
        $message = (string) ($req['message'] ?? '');
        try {
            $e = class_exists($class) && is_subclass_of($class, Throwable::class)
                ? new $class($message) : new RuntimeException($message);
        } catch (Throwable $ignored) {
            $e = new RuntimeException($message);
        }
        $handler->failed($data, $e, (string) $req['uuid'], $job);
        return;
    }
    $steps = (array) ($req['steps'] ?? []);
    // the protected steps, called in CallQueuedHandler's own scope
    (function () use ($job, $data, $steps) {
        $command = $this->setJobInstanceIfNecessary($job, $this->getCommand($data));
        $untilProcessing = $command instanceof Illuminate\Contracts\Queue\ShouldBeUniqueUntilProcessing;
        if (in_array('unique-now', $steps, true) || (in_array('unique', $steps, true) && ! $untilProcessing)) {
            $this->ensureUniqueJobLockIsReleased($command);
        }
        if (in_array('chain', $steps, true)) {
            $this->ensureNextJobInChainIsDispatched($command);
        }
        if (in_array('batch', $steps, true)) {
            $this->ensureSuccessfulBatchJobIsRecorded($command);
        }
    })->call($handler);
}

function laraq_classes(array $names): array
{
    $facts = [];
    foreach ($names as $name) {
        $name = (string) $name;
        if (! class_exists($name)) {
            $facts[$name] = ['exists' => false, 'unique' => null, 'runs_in_python' => false];
            continue;
        }
        $unique = is_subclass_of($name, Illuminate\Contracts\Queue\ShouldBeUniqueUntilProcessing::class) ? 'until_processing'
            : (is_subclass_of($name, Illuminate\Contracts\Queue\ShouldBeUnique::class) ? 'unique' : null);
        $traits = array_map(fn ($trait) => substr(strrchr('\\'.$trait, '\\'), 1), array_keys(class_uses_recursive($name)));
        $facts[$name] = ['exists' => true, 'unique' => $unique, 'runs_in_python' => in_array('RunsInPython', $traits, true)];
    }

    return $facts;
}

laraq_reply($out, ['id' => 0, 'ready' => true, 'laravel' => $app->version()]);
while (($line = fgets($in)) !== false) {
    $line = trim($line);
    if ($line === '') {
        continue;
    }
    $req = json_decode($line, true);
    $id = is_array($req) && is_int($req['id'] ?? null) ? $req['id'] : null;
    $reply = ['id' => $id, 'ok' => true];
    ob_start();
    try {
        if (! is_array($req) || ! isset($req['op'])) {
            throw new InvalidArgumentException('not a request: '.substr($line, 0, 200));
        }
        if ($req['op'] === 'classes') {
            $reply['classes'] = laraq_classes((array) ($req['classes'] ?? []));
        } elseif ($req['op'] !== 'ping') {
            laraq_run($req);
        }
    } catch (Throwable $e) {
        $reply = ['id' => $id, 'ok' => false, 'error' => get_class($e).': '.$e->getMessage()];
    }
    $stray = ob_get_clean();
    if ($stray !== '' && $stray !== false) {
        fwrite($err, $stray);
    }
    laraq_reply($out, $reply);
}
