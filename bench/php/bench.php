<?php
// laraq benchmark only (copied next to artisan in a temporary copy of fixtures/laravel8 by
// bench/run.py). Dispatches `--count` jobs with Laravel's own Bus dispatcher in this one process and
// prints {"count": N, "seconds": S} where S times the dispatch loop alone (not the bootstrap).
//   php bench.php echo --count=N --queue=Q --args='{"args":{},"mode":"ok","seconds":0}'
//   php bench.php hash --count=N --queue=Q --rounds=2000

use App\Jobs;

require __DIR__.'/bootstrap/autoload.php';
$app = require __DIR__.'/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();

$argv = $_SERVER['argv'];
array_shift($argv);
$kind = array_shift($argv);
$opts = [];
foreach ($argv as $arg) {
    if (preg_match('/^--([^=]+)=(.*)$/s', $arg, $m)) {
        $opts[$m[1]] = $m[2];
    }
}
$count = (int) ($opts['count'] ?? 1);
$queue = $opts['queue'] ?? 'default';
$a = isset($opts['args']) ? json_decode($opts['args'], true, 512, JSON_THROW_ON_ERROR) : [];
$rounds = (int) ($opts['rounds'] ?? 2000);
$dispatcher = app(Illuminate\Contracts\Bus\Dispatcher::class);

$start = hrtime(true);
for ($i = 0; $i < $count; $i++) {
    $job = $kind === 'hash'
        ? new Jobs\BenchHashJob($rounds)
        : new Jobs\EchoJob($a['args'] ?? [], $a['mode'] ?? 'ok', $a['seconds'] ?? 0);
    $job->onQueue($queue);
    $job->onConnection('redis');
    $dispatcher->dispatch($job);
}
$seconds = (hrtime(true) - $start) / 1e9;
echo json_encode(['count' => $count, 'seconds' => $seconds]), "\n";
