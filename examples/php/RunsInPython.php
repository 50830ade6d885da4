<?php

namespace App\Jobs\Concerns;

use Illuminate\Bus\UniqueLock;
use Illuminate\Container\Container;
use Illuminate\Contracts\Cache\Repository as Cache;
use Illuminate\Contracts\Queue\ShouldBeUniqueUntilProcessing;
use Illuminate\Queue\Jobs\RedisJob;
use Illuminate\Support\Facades\Log;

/**
 * The PHP side of a job that a Python handler runs (laraq).
 *
 * Use it on the job class instead of writing a handle() method. The trait does not choose where the
 * job is dispatched: the job goes to the queue it is dispatched to, as any job does. Call
 * routeToPython() from the constructor to dispatch it to pythonQueue() ("python" unless the class
 * overrides pythonQueue()).
 *
 * When a PHP worker (queue:work, Horizon) picks the job up - a queue shared with laraq, a worker on the
 * wrong queue, a queue:retry - handle() hands it over instead of running anything: in one Redis
 * script it takes the job's reservation away and appends the job, byte for byte as it was pushed
 * (the attempt the PHP worker counted is not kept), to pythonQueue() with the wake-up token a push
 * leaves. The PHP job is then marked deleted and released, so Laravel's CallQueuedHandler does none
 * of what follows a finished job: the unique lock stays held, the chain's next job is not
 * dispatched, the batch records nothing, the job is not deleted, and Horizon counts no completion and
 * records no push. A ShouldBeUniqueUntilProcessing lock, which Laravel releases just before
 * handle(), is taken again with the owner it was dispatched with. Under Horizon the job's record is
 * set back to pending and its timer dropped. The job then runs once in Python, and laraq does the
 * rest as artisan would (chain, batch, lock, failed(), Horizon's records).
 *
 * A hand-off is logged at debug level. When the same job comes back to the same PHP worker (no Python
 * worker took it from pythonQueue() yet), the worker hands it over again and waits a second before its
 * next job, so that it does not spin and a Python worker gets the chance to take it; on the tenth
 * return (and every 60th after) it logs a warning: no Python worker is taking jobs from that queue. Dispatched synchronously, or on a queue connection that is
 * not Redis, handle() throws instead of pretending.
 *
 *     class GenerateReport implements ShouldQueue
 *     {
 *         use Dispatchable, InteractsWithQueue, Queueable, SerializesModels, RunsInPython;
 *
 *         public function __construct(public string $document)
 *         {
 *             $this->routeToPython();
 *         }
 *     }
 *
 * Copy this file into app/Jobs/Concerns/ of your Laravel app (namespace App\Jobs\Concerns). It also
 * holds RunsInPythonHandOff, the hand-off's steps, which only the trait's handle() uses (the file is
 * loaded with the trait, before handle() can run).
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
        if (! $job instanceof RedisJob) {
            throw new \LogicException(static::class.' is run by a Python worker (laraq), which reads Redis queues only: '
                .'dispatch it on a redis queue connection, not '.$job->getConnectionName());
        }
        $target = $this->pythonQueue();
        $uuid = $job->uuid();
        // The lock and Horizon's record first: once the job is on $target, a Python worker may take it at
        // once (release the lock, record the run).
        if ($this instanceof ShouldBeUniqueUntilProcessing) {
            RunsInPythonHandOff::retakeUniqueLock($this, $uuid);
        }
        RunsInPythonHandOff::horizonPending($job);
        RunsInPythonHandOff::move($job, $target);
        // Laravel's CallQueuedHandler skips the unique lock, the chain, the batch and the delete for a job
        // marked released; marked deleted too, the worker fires no JobReleased event for it.
        (function () {
            $this->deleted = true;
            $this->released = true;
        })->call($job);
        Log::debug(static::class.' is run by a Python worker: handed over from queue '.$job->getQueue()
            .' to queue '.$target, ['uuid' => $uuid]);
        $returns = RunsInPythonHandOff::returns($uuid);
        if ($returns > 0) {
            // The job is on $target again; this worker waits before its next job so that a Python worker
            // gets the chance to take it instead of this worker taking it back at once.
            if ($returns % 60 === 10) {
                Log::warning(static::class.' is run by a Python worker, but none took it from queue '.$target
                    .': this PHP worker has handed it over '.($returns + 1).' times', ['uuid' => $uuid]);
            }
            sleep(1);
        }
    }
}

/** The Redis, lock and Horizon steps of RunsInPython's hand-off (kept out of the job class's methods). */
final class RunsInPythonHandOff
{
    /** Job ids this worker process handed over lately, each with how often it came back. */
    private static array $handed = [];

    /** How many times this worker process handed this job over before (it is remembered afresh). */
    public static function returns(?string $uuid): int
    {
        if ($uuid === null || $uuid === '') {
            return 0;
        }
        $count = self::$handed[$uuid] ?? -1;
        unset(self::$handed[$uuid]);
        self::$handed[$uuid] = $count + 1;
        if (count(self::$handed) > 1000) {
            array_shift(self::$handed);
        }

        return $count + 1;
    }

    /** Take the reservation away and append the job as it was pushed, with a push's wake-up token. */
    public static function move(RedisJob $job, string $target): void
    {
        $queue = $job->getRedisQueue();
        $from = $queue->getQueue($job->getQueue());
        $to = $queue->getQueue($target);
        $queue->getConnection()->eval(<<<'LUA'
            redis.call('zrem', KEYS[1], ARGV[1])
            redis.call('rpush', KEYS[2], ARGV[2])
            redis.call('rpush', KEYS[3], 1)
            LUA, 3, $from.':reserved', $to, $to.':notify', $job->getReservedJob(), $job->getRawBody());
    }

    /** Take a ShouldBeUniqueUntilProcessing lock again, as it was dispatched (key, time, owner). */
    public static function retakeUniqueLock(object $command, ?string $uuid): void
    {
        $default = Container::getInstance()->make(Cache::class);
        $cache = method_exists($command, 'uniqueVia') ? ($command->uniqueVia() ?? $default) : $default;
        // UniqueLock's own key and lifetime (their shape differs between Laravel releases).
        [$key, $seconds] = (function ($job) {
            $key = method_exists($this, 'getKey') ? $this->getKey($job)
                : 'laravel_unique_job:'.get_class($job).(method_exists($job, 'uniqueId') ? $job->uniqueId() : ($job->uniqueId ?? ''));
            $seconds = method_exists($job, 'uniqueFor') ? $job->uniqueFor()
                : (method_exists($this, 'getAttributeValue')
                    ? $this->getAttributeValue($job, 'Illuminate\Queue\Attributes\UniqueFor', 'uniqueFor')
                    : ($job->uniqueFor ?? 0));

            return [$key, (int) ($seconds ?? 0)];
        })->call(new UniqueLock($default), $command);
        if (! $cache->lock($key, $seconds, $command->uniqueLockOwner ?? null)->get()) {
            Log::warning(get_class($command).' is run by a Python worker: its unique lock '.$key
                .' was taken by another dispatch while a PHP worker handed the job over', ['uuid' => $uuid]);
        }
    }

    /** Under Horizon: the job's record back to pending, as pushed, and its timer dropped. */
    public static function horizonPending(RedisJob $job): void
    {
        $horizonQueue = 'Laravel\Horizon\RedisQueue';
        if (! $job->getRedisQueue() instanceof $horizonQueue) {
            return;
        }
        $app = Container::getInstance();
        $id = $job->getJobId();
        $app->make('Laravel\Horizon\Stopwatch')->forget($id);
        $repository = $app->make('Laravel\Horizon\Contracts\JobRepository');
        (function () use ($id, $job) {
            $this->connection()->eval(<<<'LUA'
                if redis.call('exists', KEYS[1]) == 1 then
                    redis.call('hset', KEYS[1], 'status', 'pending', 'payload', ARGV[1])
                    redis.call('hdel', KEYS[1], 'reserved_at')
                end
                LUA, 1, $id, $job->getRawBody());
        })->call($repository);
    }
}
