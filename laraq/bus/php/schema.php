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
            $found[] = $ns.str_replace('/', '\\', $relative);
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
            $out[] = [
                'name' => $p->getName(),
                'visibility' => $visibility,
                'class' => $c->getName(),
                'type' => $type ? (string) $type : null,
                'initialized' => $initialized,
                'default' => $initialized ? base64_encode(serialize($p->getValue($blank))) : null,
            ];
        }
    }
    return $out;
}

$jobs = [];
$enums = [];
foreach ($only ?: laraq_classes($base) as $name) {
    try {
        if (! class_exists($name) && ! enum_exists($name)) {
            continue;
        }
    } catch (Throwable $e) {
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
        }
        continue;
    }
    if ($class->isAbstract() || $class->isInterface() || ! $class->implementsInterface(Illuminate\Contracts\Queue\ShouldQueue::class)) {
        continue;
    }
    $methods = [];
    foreach (['tries', 'backoff', 'retryUntil', 'timeout', 'displayName', 'uniqueId', 'uniqueFor', 'uniqueVia',
              'middleware', 'shouldBeEncrypted'] as $m) {
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
    $jobs[$name] = [
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

echo json_encode(['laravel' => $app->version(), 'jobs' => $jobs, 'enums' => $enums],
    JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_PRETTY_PRINT), "\n";
