<?php
// laraq's in-process PHP half of a job (laraq/bus/phpprocess.py starts it, one per worker process).
// Boots the app once, then answers one JSON request per line on stdin with one JSON line on stdout:
//   {"op": "success", "body": BASE64 OF THE RAW BODY, "connection": C, "queue": Q, "steps": ["unique-now"|"unique"|"chain"|"batch"]}
//   {"op": "failed",  "body": BASE64 OF THE RAW BODY, "connection": C, "queue": Q, "uuid": U, "class": E, "message": M}
//   {"op": "ping"}
// Each step is the app's own Illuminate\Queue\CallQueuedHandler method, called on the command PHP
// unserializes from the original payload: ensureUniqueJobLockIsReleased, ensureNextJobInChainIsDispatched,
// ensureSuccessfulBatchJobIsRecorded, and failed() (unique lock, batch recordFailedJob, chain catch
// callbacks, the command's failed()). handle() is never called. Output the app writes is sent to stderr.
// Usage: php lifecycle.php BASE_PATH

$base = rtrim($argv[1] ?? getcwd(), '/');
foreach (['/bootstrap/autoload.php', '/vendor/autoload.php'] as $loader) {
    if (is_file($base.$loader)) {
        require $base.$loader;
        break;
    }
}
$app = require $base.'/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();

$out = fopen('php://stdout', 'w');
$err = fopen('php://stderr', 'w');

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

fwrite($out, json_encode(['ready' => true, 'laravel' => $app->version()])."\n");
while (($line = fgets(STDIN)) !== false) {
    $line = trim($line);
    if ($line === '') {
        continue;
    }
    $req = json_decode($line, true);
    $reply = ['ok' => true];
    ob_start();
    try {
        if (! is_array($req) || ! isset($req['op'])) {
            throw new InvalidArgumentException('not a request: '.substr($line, 0, 200));
        }
        if ($req['op'] !== 'ping') {
            laraq_run($req);
        }
    } catch (Throwable $e) {
        $reply = ['ok' => false, 'error' => get_class($e).': '.$e->getMessage()];
    }
    $stray = ob_get_clean();
    if ($stray !== '' && $stray !== false) {
        fwrite($err, $stray);
    }
    fwrite($out, json_encode($reply, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE)."\n");
    fflush($out);
}
