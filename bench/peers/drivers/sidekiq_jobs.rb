# Sidekiq's side: the job classes (sidekiq -r ./sidekiq_jobs.rb) and, run as a script,
#   ruby sidekiq_jobs.rb enqueue N KIND     Sidekiq::Client.push_bulk, 1000 at a time
# Retries off: a failed job counts in stat:failed and goes nowhere else.
require 'sidekiq'
require 'socket'

class NoopJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform; end
end

class IoSyncJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  def perform
    s = TCPSocket.new('127.0.0.1', Integer(ENV.fetch('PEERS_IO_PORT')))
    s.write("x\n")
    raise 'the I/O server closed before replying' unless s.gets
    s.close
  end
end

if __FILE__ == $PROGRAM_NAME && ARGV[0] == 'enqueue'
  klass = { 'noop' => NoopJob, 'io_sync' => IoSyncJob }.fetch(ARGV[2])
  n = Integer(ARGV[1])
  (0...n).step(1000) do |start|
    Sidekiq::Client.push_bulk('class' => klass, 'queue' => ENV.fetch('PEERS_QUEUE'),
                              'args' => Array.new([1000, n - start].min) { [] })
  end
end
