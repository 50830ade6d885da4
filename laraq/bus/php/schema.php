<?php
// laraq schema exporter: run by `laraq schema --from APP` with the app's own autoloader and bootstrap.
// Prints JSON describing each queued job class (its properties in serialize() order with their defaults,
// the interfaces, traits and methods that shape its payload) and each backed enum under app/.
// Usage: php schema.php BASE_PATH [Class ...]

$base = rtrim($argv[1] ?? getcwd(), '/');
$only = array_slice($argv, 2);
foreach (['/bootstrap/autoload.php', '/vendor/autoload.php'] as $loader) {
    if (is_file($base.$loader)) {
        require $base.$loader;
        break;
    }
}
$app = require $base.'/bootstrap/app.php';
$app->make(Illuminate\Contracts\Console\Kernel::class)->bootstrap();

function laraq_classes(string $base): array
{
    $roots = ['App\\' => $base.'/app'];
    $composer = $base.'/composer.json';
    if (is_file($composer)) {
        $json = json_decode((string) file_get_contents($composer), true) ?: [];
        foreach (($json['autoload']['psr-4'] ?? []) as $ns => $dirs) {
            foreach ((array) $dirs as $dir) {
                $roots[$ns] = $base.'/'.rtrim($dir, '/');
            }
        }
    }
    $found = [];
    foreach ($roots as $ns => $dir) {
        if (! is_dir($dir)) {
            continue;
        }
        $it = new RecursiveIteratorIterator(new RecursiveDirectoryIterator($dir, FilesystemIterator::SKIP_DOTS));
        foreach ($it as $file) {
            if ($file->getExtension() !== 'php') {
                continue;
            }
            $relative = substr($file->getPathname(), strlen($dir) + 1, -4);
            $found[$ns.str_replace('/', '\\', $relative)] = $file->getPathname();
        }
    }
    return $found;
}

// The properties PHP's serialize() writes, in its order: the root ancestor's first, each class's own
// (with the properties of its traits) in declaration order.
function laraq_properties(ReflectionClass $class): array
{
    $chain = [];
    for ($c = $class; $c; $c = $c->getParentClass()) {
        array_unshift($chain, $c);
    }
    $blank = $class->newInstanceWithoutConstructor();
    $out = [];
    foreach ($chain as $c) {
        foreach ($c->getProperties() as $p) {
            if ($p->isStatic() || $p->getDeclaringClass()->getName() !== $c->getName()) {
                continue;
            }
            if ($p->isPrivate() && $c->getName() !== $p->getDeclaringClass()->getName()) {
                continue;
            }
            $visibility = $p->isPublic() ? 'public' : ($p->isProtected() ? 'protected' : 'private');
            $p->setAccessible(true);
            $initialized = $p->isInitialized($blank);
            $type = $p->getType();
            $promoted = method_exists($p, 'isPromoted') && $p->isPromoted();
            $ctorDefault = null;
            if ($promoted && ($ctor = $class->getConstructor())) {
                foreach ($ctor->getParameters() as $param) {
                    if ($param->getName() === $p->getName() && $param->isDefaultValueAvailable()) {
                        $ctorDefault = base64_encode(serialize($param->getDefaultValue()));
                    }
                }
            }
            // an untyped property set from a typed constructor parameter of the same name takes its type
            $declared = $type;
            if ($type === null && ($ctor = $class->getConstructor())) {
                foreach ($ctor->getParameters() as $param) {
                    if ($param->getName() === $p->getName() && $param->getType() !== null) {
                        $declared = $param->getType();
                    }
                }
            }
            $out[] = [
                'name' => $p->getName(),
                'visibility' => $visibility,
                'class' => $c->getName(),
                'type' => $type ? (string) $type : null,
                'initialized' => $initialized,
                'default' => $initialized ? base64_encode(serialize($p->getValue($blank))) : null,
                // for typed classes (laraq schema --python): the type's names, where it comes from
                'types' => laraq_type_names($declared),
                'nullable' => $declared ? $declared->allowsNull() : true,
                'promoted' => $promoted,
                'ctor_default' => $ctorDefault,
                'framework' => laraq_framework_trait($class, $p->getName()),
            ];
        }
    }
    return $out;
}

// The names of a property's type (a union's members; a builtin such as int stays lower case).
function laraq_type_names(?ReflectionType $type): array
{
    if ($type === null) {
        return [];
    }
    if ($type instanceof ReflectionNamedType) {
        return [$type->getName()];
    }
    $names = [];
    foreach ($type->getTypes() as $t) {
        $names = array_merge($names, laraq_type_names($t));
    }
    return $names;
}

// Whether a framework trait (Queueable, InteractsWithQueue, Batchable...) declares the property.
function laraq_framework_trait(ReflectionClass $class, string $name): bool
{
    foreach (class_uses_recursive($class->getName()) as $trait) {
        if ((str_starts_with($trait, 'Illuminate\\') || str_starts_with($trait, 'Laravel\\'))
            && property_exists($trait, $name)) {
            return true;
        }
    }
    return false;
}

// What a class named in a property type is, for typed classes: a backed enum, an Eloquent model or
// collection, a date, or another object.
function laraq_kind(string $name): ?string
{
    if (in_array(strtolower($name), ['int', 'float', 'string', 'bool', 'false', 'true', 'array', 'iterable',
        'mixed', 'null', 'object', 'callable', 'self', 'static', 'never', 'void'], true)) {
        return null;
    }
    if (enum_exists($name)) {
        return (new ReflectionEnum($name))->isBacked() ? 'enum' : 'object';
    }
    if (! class_exists($name) && ! interface_exists($name)) {
        return 'object';
    }
    if (is_a($name, Illuminate\Database\Eloquent\Model::class, true)) {
        return 'model';
    }
    if (is_a($name, Illuminate\Database\Eloquent\Collection::class, true)) {
        return 'collection';
    }
    if (is_a($name, DateTimeInterface::class, true)) {
        return 'date';
    }
    return 'object';
}

// A class's source file, relative to the app when it is inside it, and its SHA-256 (typed modules
// record these, so that doctor and the banner can tell when the PHP classes changed).
function laraq_source(string $base, string $name): ?array
{
    $file = (new ReflectionClass($name))->getFileName();
    if (! $file || ! is_file($file)) {
        return null;
    }
    $path = str_starts_with($file, $base.'/') ? substr($file, strlen($base) + 1) : $file;
    return ['path' => $path, 'sha256' => hash_file('sha256', $file)];
}

// 13.x queue attributes (#[Tries], #[Backoff], #[Queue], #[DebounceFor]...): the value each one gives
// the setting it names, as the framework's ReadsClassAttributes resolves it on an instance still holding
// the class's defaults (the attribute on the class, a trait or a parent; a subclass's own public
// property overriding it). Keyed by the property the framework reads; only attributes the class carries.
function laraq_queue_attributes(ReflectionClass $class): array
{
    if (! trait_exists(Illuminate\Support\Traits\ReadsClassAttributes::class)) {
        return [];
    }
    $reader = new class {
        use Illuminate\Support\Traits\ReadsClassAttributes;

        public function read(object $job, string $attribute, string $property): array
        {
            if ($this->getAttributeInstance($job, $attribute) === null) {
                return [false, null];
            }
            return [true, $this->getAttributeValue($job, $attribute, $property)];
        }

        public function instance(object $job, string $attribute): ?object
        {
            return $this->getAttributeInstance($job, $attribute);
        }
    };
    $blank = $class->newInstanceWithoutConstructor();
    $ns = 'Illuminate\\Queue\\Attributes\\';
    $out = [];
    foreach (['Tries' => 'tries', 'Backoff' => 'backoff', 'Timeout' => 'timeout', 'MaxExceptions' => 'maxExceptions',
              'FailOnTimeout' => 'failOnTimeout', 'DeleteWhenMissingModels' => 'deleteWhenMissingModels',
              'UniqueFor' => 'uniqueFor', 'Queue' => 'queue', 'Connection' => 'connection', 'Delay' => 'delay',
              'DebounceFor' => 'debounceFor'] as $short => $property) {
        if (! class_exists($ns.$short)) {
            continue;
        }
        [$has, $value] = $reader->read($blank, $ns.$short, $property);
        if ($has) {
            $out[$property] = $value instanceof UnitEnum ? Illuminate\Support\enum_value($value) : $value;
        }
    }
    if (isset($out['debounceFor'])) {
        $out['debounceMaxWait'] = $reader->instance($blank, $ns.'DebounceFor')->maxWait ?? null;
    }
    return $out;
}

$jobs = [];
$enums = [];
$kinds = [];
$sources = [];
// each class whose file PHP could not load (a parse error, a missing parent): the class and why
$unreadable = [];
// each model's connection as a fetched model serializes it (its $connection, else the default connection)
$connections = [];
foreach ($only ? array_fill_keys($only, null) : laraq_classes($base) as $name => $file) {
    try {
        if ($file !== null) {
            // parsed without running it (TOKEN_PARSE throws the ParseError that loading it would)
            token_get_all((string) file_get_contents($file), TOKEN_PARSE);
        }
        if (! class_exists($name) && ! enum_exists($name) && ! interface_exists($name) && ! trait_exists($name)) {
            if ($only) {
                $unreadable[$name] = 'no such class';
            }
            continue;
        }
        if (! class_exists($name) && ! enum_exists($name)) {
            continue;
        }
    } catch (Throwable $e) {
        $unreadable[$name] = get_class($e).': '.$e->getMessage().' in '.$e->getFile().':'.$e->getLine();
        continue;
    }
    $class = new ReflectionClass($name);
    if ($class->isEnum()) {
        $enum = new ReflectionEnum($name);
        if ($enum->isBacked()) {
            $cases = [];
            foreach ($enum->getCases() as $case) {
                $cases[$case->getName()] = $case->getBackingValue();
            }
            $enums[$name] = $cases;
            $sources[$name] = laraq_source($base, $name);
        }
        continue;
    }
    if ($class->isAbstract() || $class->isInterface() || ! $class->implementsInterface(Illuminate\Contracts\Queue\ShouldQueue::class)) {
        continue;
    }
    $methods = [];
    foreach (['tries', 'backoff', 'retryUntil', 'timeout', 'displayName', 'uniqueId', 'uniqueFor', 'uniqueVia',
              'middleware', 'shouldBeEncrypted', 'tags', 'debounceId', 'debounceVia'] as $m) {
        if ($class->hasMethod($m)) {
            $methods[] = $m;
        }
    }
    $attributes = [];
    if (method_exists($class, 'getAttributes')) {
        foreach ($class->getAttributes() as $attr) {
            $attributes[] = ['name' => $attr->getName(), 'arguments' => $attr->getArguments()];
        }
    }
    $sources[$name] = laraq_source($base, $name);
    $jobs[$name] = [
        'queue_attributes' => laraq_queue_attributes($class),
        'interfaces' => array_values($class->getInterfaceNames()),
        'traits' => array_values(class_uses_recursive($name)),
        'methods' => $methods,
        'attributes' => $attributes,
        'properties' => laraq_properties($class),
        // SerializesModels writes the properties in this order (ReflectionClass::getProperties)
        'reflection_order' => array_values(array_map(fn ($p) => $p->getName(),
            array_filter($class->getProperties(), fn ($p) => ! $p->isStatic()))),
    ];
}

foreach ($jobs as $job) {
    foreach ($job['properties'] as $p) {
        foreach ($p['types'] as $t) {
            $kind = laraq_kind($t);
            if ($kind === null) {
                continue;
            }
            $kinds[$t] = $kind;
            if ($kind === 'enum' && ! isset($enums[$t])) {
                $cases = [];
                foreach ((new ReflectionEnum($t))->getCases() as $case) {
                    $cases[$case->getName()] = $case->getBackingValue();
                }
                $enums[$t] = $cases;
            }
            if ($kind === 'model' && ! isset($connections[$t])) {
                $model = (new ReflectionClass($t))->newInstanceWithoutConstructor();
                $connections[$t] = $model->getConnectionName() ?? config('database.default');
            }
            if (in_array($kind, ['enum', 'model'], true) && ! isset($sources[$t])) {
                $sources[$t] = laraq_source($base, $t);
            }
        }
    }
}

echo json_encode(['laravel' => $app->version(), 'jobs' => $jobs, 'enums' => $enums, 'kinds' => $kinds,
                  'sources' => array_filter($sources), 'connections' => $connections, 'unreadable' => $unreadable],
    JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_PRETTY_PRINT), "\n";
