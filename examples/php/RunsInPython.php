<?php

namespace App\Jobs\Concerns;

use Illuminate\Support\Facades\Log;
use Illuminate\Support\Facades\Queue;

/**
 * The PHP side of a job that a Python handler runs (laraq).
 *
 * Use it on the job class instead of writing a handle() method. The job is then dispatched to the
 * queue laraq works (pythonQueue(), "python" unless the class says otherwise), and if a PHP worker
 * ever picks it up anyway (a shared queue, a queue:work on the wrong queue, a queue:retry) it does not
 * run an empty handle() and report the job done: it puts the job, byte for byte as it was pushed
 * (attempts not counted), on the Python queue, logs a warning, and lets the PHP worker delete its own
 * reservation. Dispatched synchronously (no queue at all), it throws instead of pretending.
 *
 *     class GenerateReport implements ShouldQueue
 *     {
 *         use Dispatchable, InteractsWithQueue, Queueable, SerializesModels, RunsInPython;
 *
 *         public function __construct(public string $document) {}
 *     }
 *
 * Copy this file into app/Jobs/Concerns/ of your Laravel app (namespace App\Jobs\Concerns).
 */
trait RunsInPython
{
    /** The queue laraq works for this class; override it in the class to change it. */
    public function pythonQueue(): string
    {
        return 'python';
    }

    /** Call from the constructor to dispatch the job to pythonQueue() (Queueable::onQueue). */
    protected function routeToPython(): void
    {
        $this->onQueue($this->pythonQueue());
    }

    public function handle(): void
    {
        $job = $this->job ?? null;
        if ($job === null) {
            throw new \LogicException(static::class.' is run by a Python worker (laraq): dispatch it to a queue, not synchronously');
        }
        $target = $this->pythonQueue();
        Queue::connection($job->getConnectionName())->pushRaw($job->getRawBody(), $target);
        Log::warning(static::class.' is run by a Python worker: a PHP worker picked it up on queue '
            .$job->getQueue().' and handed it to queue '.$target.' untouched', ['uuid' => $job->uuid()]);
        // Returning normally: the PHP worker deletes its reservation; the job waits for laraq on $target.
    }
}
