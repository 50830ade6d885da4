<?php

namespace App\Jobs;

use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

// laraq benchmark only (copied into a temporary copy of fixtures/laravel8 by bench/run.py; the
// fixture itself is not changed): the CPU-light workload, a chain of `rounds` SHA-256 digests.
// bench/handlers.py does exactly the same in Python.
class BenchHashJob implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    public $rounds;
    public $seed;

    public function __construct(int $rounds = 2000, string $seed = 'laraq')
    {
        $this->rounds = $rounds;
        $this->seed = $seed;
    }

    public function handle(): void
    {
        $h = $this->seed;
        for ($i = 0; $i < $this->rounds; $i++) {
            $h = hash('sha256', $h, true);
        }
    }
}
